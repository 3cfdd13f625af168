-- The lock table's DDL before semaphores and shared locks (LockerSchema up to
-- commit a88ecf7), kept as it was: the table
-- TestLocker_CreateSchema_UpgradesTableOfTheOwnerDDL upgrades.
CREATE TABLE IF NOT EXISTS fence_locks (
    name       text COLLATE "C" PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    lease      text        NOT NULL,
    expires_at timestamptz NOT NULL,
    owner      text        NOT NULL DEFAULT ''
);
ALTER TABLE fence_locks ADD COLUMN IF NOT EXISTS owner text NOT NULL DEFAULT '';
CREATE OR REPLACE FUNCTION fence_locks_keep_counters() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'fence: % on %: lock rows hold token counters that must never go down or be deleted', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END $$;
CREATE OR REPLACE TRIGGER fence_locks_no_lower BEFORE UPDATE ON fence_locks
    FOR EACH ROW WHEN (NEW.token < OLD.token) EXECUTE FUNCTION fence_locks_keep_counters();
CREATE OR REPLACE TRIGGER fence_locks_no_delete BEFORE DELETE ON fence_locks
    FOR EACH ROW EXECUTE FUNCTION fence_locks_keep_counters();
CREATE OR REPLACE TRIGGER fence_locks_no_truncate BEFORE TRUNCATE ON fence_locks
    FOR EACH STATEMENT EXECUTE FUNCTION fence_locks_keep_counters();
