-- `slurm sync` lifted its block of an account by setting `GrpJobs=-1`
-- (no limit), erasing the limit the account had before the block (a
-- center's `GrpJobs=50` was gone after a spent project was topped up; a
-- review of 2026-12-07). A block now keeps the account's limit before it,
-- and the unblock sets it again. Blocks recorded before keep '' (none
-- known): their unblock sets no limit, as before.

ALTER TABLE enforcement_action
    ADD COLUMN previous_grpjobs text NOT NULL DEFAULT '' CHECK (previous_grpjobs ~ '^[0-9]{0,18}$');
COMMENT ON COLUMN enforcement_action.previous_grpjobs IS
    'For a block: the account''s GrpJobs before it ('''' for none), which the unblock sets again.';
