-- What a billing or ingest login could write past the guards with plain
-- SQL, and neither the database nor the audit noticed (an auditor's
-- review of 2026-12-07, each reproduced on the demo ledger):
--
-- 1. A month's storage billed twice: a copy of a project's storage charge
--    (and its segments) inserted by hand. The audit recomputes each
--    storage line against its project's month and rate, so two identical
--    lines both passed, and the closed statement billed 450.00 for a
--    50 TB quota at 4.50. A storage run posts one charge per project and
--    storage rate in a month (domain::storage): now a unique index says
--    so. A ledger that already holds such a copy fails this migration,
--    naming the key: that is the copy to find.
-- 2. An entry's `posted_at` given by hand: an adjustment backdated to
--    March drew on no allocation (a draw is at its posting instant), so
--    balances, `check` and alerts hid a 500.00 debit the statement billed.
--    Every entry is posted now: the seal digest's trigger (the only BEFORE
--    trigger on the ledger's inserts) sets it before it hashes the row.
-- 3. A rejection's evidence rewritten: its raw record, hash, format and
--    first sighting could be replaced (then the line dismissed as junk).
--    Reading a line again updates where it was seen, why it is rejected
--    and when; the record itself never changes.
-- 4. A journal export logged with totals and a date of one's choosing
--    (only its digest was checked): the log is now what the export was,
--    at the instant it was logged, or refused.

CREATE UNIQUE INDEX ledger_entry_storage_once ON ledger_entry (project_id, period, storage_rate_id)
    WHERE kind = 'storage';
COMMENT ON INDEX ledger_entry_storage_once IS
    'A storage run posts one charge per project and storage rate in a month: a second is a month billed twice.';

CREATE OR REPLACE FUNCTION hl_entry_seal_digest() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Posted now, whatever an insert gives (migration 0062): a draw on an
    -- allocation is at its posting instant.
    NEW.posted_at := now();
    NEW.seal_digest := sha256(convert_to(public.hl_entry_text_v3(NEW), 'UTF8'));
    RETURN NEW;
END
$$;

CREATE FUNCTION hl_rejected_record_evidence() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.raw IS DISTINCT FROM OLD.raw
       OR NEW.raw_sha256 IS DISTINCT FROM OLD.raw_sha256
       OR NEW.raw_bytes IS DISTINCT FROM OLD.raw_bytes
       OR NEW.source_format IS DISTINCT FROM OLD.source_format
       OR NEW.first_seen_at IS DISTINCT FROM OLD.first_seen_at THEN
        RAISE EXCEPTION 'rejected record % is kept as it was read: its record, format and first sighting are not rewritten', OLD.id
            USING ERRCODE = 'HL001';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER rejected_record_evidence BEFORE UPDATE ON rejected_record
    FOR EACH ROW EXECUTE FUNCTION hl_rejected_record_evidence();
ALTER TABLE rejected_record ENABLE ALWAYS TRIGGER rejected_record_evidence;

CREATE FUNCTION hl_journal_export_as_exported() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    lines integer;
    debits numeric;
    credits numeric;
BEGIN
    NEW.exported_at := now();
    -- As the export lays them out (service::journal): a line's amount is
    -- of the statement's sign on its side.
    SELECT count(*), coalesce(sum(s) FILTER (WHERE s > 0), 0), coalesce(sum(-s) FILTER (WHERE s < 0), 0)
      INTO lines, debits, credits
      FROM (SELECT CASE WHEN j.side = 'debit' THEN j.amount ELSE -j.amount END AS s
              FROM public.hl_journal_lines(NEW.period) j) x;
    IF NEW.line_count IS DISTINCT FROM lines OR NEW.debit_total IS DISTINCT FROM debits
       OR NEW.credit_total IS DISTINCT FROM credits
       OR NEW.digest IS DISTINCT FROM public.hl_journal_digest(NEW.period) THEN
        RAISE EXCEPTION 'an export of %''s journal is logged as it was: % lines, % debit and % credit, and its digest (not % lines, % and %)',
            to_char(NEW.period, 'YYYY-MM'), lines, debits, credits, NEW.line_count, NEW.debit_total, NEW.credit_total
            USING ERRCODE = 'HL005';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER journal_export_as_exported BEFORE INSERT ON journal_export
    FOR EACH ROW EXECUTE FUNCTION hl_journal_export_as_exported();
ALTER TABLE journal_export ENABLE ALWAYS TRIGGER journal_export_as_exported;
