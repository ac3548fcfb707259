-- The guards could be walked around with a temporary table (a security
-- review of 2026-12-07): a trigger function without a search path of its
-- own looks a table up by the session's, and a session's temporary schema
-- comes first. Any role may create temporary tables, so the ingest role,
-- after `CREATE TEMP TABLE closed_period (period date)`, posted a copy of a
-- job charge into a closed month (the guard read the empty temporary
-- table: no month closed), and the billing role an adjustment into March,
-- or, with a temporary `billing_run`, a quota into months already billed.
-- verify and the audit found the broken seals afterwards; the database
-- refuses them again now.
--
-- Every trigger function runs with the search path the owner's-rights
-- functions have had since they were written: the ledger's schema, then
-- the temporary one (searched last, so it can add names but shadow none).
-- Functions they call inherit it for the call. One is left as it is:
-- hl_entry_seal_digest, which runs for every entry posted and reads no
-- table (its one call is schema-qualified, public.hl_entry_text_v3, which
-- reads only the row it is given); a setting on it would be a save and
-- restore of the search path per entry.
ALTER FUNCTION hl_access_stamp() SET search_path = public, pg_temp;
ALTER FUNCTION hl_bump_rules_version() SET search_path = public, pg_temp;
ALTER FUNCTION hl_center_guard() SET search_path = public, pg_temp;
ALTER FUNCTION hl_closed_period_in_order() SET search_path = public, pg_temp;
ALTER FUNCTION hl_cluster_guard() SET search_path = public, pg_temp;
ALTER FUNCTION hl_discount_guard() SET search_path = public, pg_temp;
ALTER FUNCTION hl_hold_check() SET search_path = public, pg_temp;
ALTER FUNCTION hl_job_record_refuse_change() SET search_path = public, pg_temp;
ALTER FUNCTION hl_journal_export_as_exported() SET search_path = public, pg_temp;
ALTER FUNCTION hl_journal_set_check() SET search_path = public, pg_temp;
ALTER FUNCTION hl_journal_set_whole() SET search_path = public, pg_temp;
ALTER FUNCTION hl_ledger_entry_guard() SET search_path = public, pg_temp;
ALTER FUNCTION hl_ledger_refuse_change() SET search_path = public, pg_temp;
ALTER FUNCTION hl_project_class_check() SET search_path = public, pg_temp;
ALTER FUNCTION hl_quota_after_billed_months() SET search_path = public, pg_temp;
ALTER FUNCTION hl_rate_card_guard() SET search_path = public, pg_temp;
ALTER FUNCTION hl_rate_class_guard() SET search_path = public, pg_temp;
ALTER FUNCTION hl_read_committed_only() SET search_path = public, pg_temp;
ALTER FUNCTION hl_refuse_change() SET search_path = public, pg_temp;
ALTER FUNCTION hl_rejected_record_evidence() SET search_path = public, pg_temp;
ALTER FUNCTION hl_rejected_record_guard() SET search_path = public, pg_temp;
ALTER FUNCTION hl_rejected_record_no_truncate() SET search_path = public, pg_temp;
ALTER FUNCTION hl_storage_rate_guard() SET search_path = public, pg_temp;
