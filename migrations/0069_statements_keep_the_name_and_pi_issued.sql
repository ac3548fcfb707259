-- A closed month's statement is issued once, numbered; reprinted later it
-- must read as issued. Its project's name and PI were read from the project
-- as it is now, so a PI change or a renamed lab after the close changed a
-- final statement's header (an operator's year, 2026-12-08). Each statement
-- keeps them as they were when it was issued: filled by the database as the
-- close inserts it (whatever an insert gives), never changed afterwards
-- (statement_append_only). Statements issued before this migration have
-- none (NULL) and show the project's current ones, as before.

ALTER TABLE statement ADD COLUMN project_name text, ADD COLUMN project_pi text;

CREATE FUNCTION hl_statement_header() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    SELECT p.name, p.pi INTO NEW.project_name, NEW.project_pi FROM project p WHERE p.id = NEW.project_id;
    RETURN NEW;
END
$$;

CREATE TRIGGER statement_header BEFORE INSERT ON statement
    FOR EACH ROW EXECUTE FUNCTION hl_statement_header();
ALTER TABLE statement ENABLE ALWAYS TRIGGER statement_header;
