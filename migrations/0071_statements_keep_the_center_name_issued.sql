-- A final statement reads as it was issued (migration 0069 kept its
-- project's name and PI): also the name of the center that issued it,
-- printed at the head of every document. A center renamed after a close
-- (a reorganisation: "Research Computing" to "Advanced Research
-- Computing") changed the header of every earlier statement reprinted
-- (a review of 2026-12-07). Filled by the same trigger as the project's
-- name and PI, at the close's insert; statements issued before this
-- migration have none (NULL) and show the center's current name.

ALTER TABLE statement ADD COLUMN center_name text;

CREATE OR REPLACE FUNCTION hl_statement_header() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    SELECT p.name, p.pi INTO NEW.project_name, NEW.project_pi FROM project p WHERE p.id = NEW.project_id;
    SELECT c.name INTO NEW.center_name FROM center c;
    RETURN NEW;
END
$$;
