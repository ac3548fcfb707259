-- One byte policy for every path (docs/recording.md, "Bytes that are not
-- UTF-8"): a record whose bytes are not valid UTF-8 is read with each bad
-- byte as U+FFFD. If that leaves the charge's fields intact (the bad bytes
-- are in a user or job name, a state), it is charged like any other; if not,
-- it is rejected as malformed. Either way `raw` holds the record as read
-- (with U+FFFD) and `raw_bytes` the bytes exactly as received, so nothing of
-- what the scheduler wrote is lost. NULL when the record was valid UTF-8
-- (then `raw` is exact). A record holding a NUL byte (which no text column
-- can hold) is rejected, its bytes kept here.

ALTER TABLE job_record ADD COLUMN raw_bytes bytea CHECK (length(raw_bytes) <= 16777216);
ALTER TABLE rejected_record ADD COLUMN raw_bytes bytea CHECK (length(raw_bytes) <= 16777216);
