-- The fleet's shared state (fleet.go): each destination's circuit, and the
-- maintenance leader's lease. Times are unix milliseconds.
CREATE TABLE {{prefix}}circuits (
    destination       TEXT    PRIMARY KEY,
    open              INTEGER NOT NULL DEFAULT 0 CHECK (open IN (0, 1)),
    opened_by         TEXT    NOT NULL DEFAULT '',
    opened_at         INTEGER,
    next_probe        INTEGER,
    probe_interval_ms INTEGER NOT NULL DEFAULT 0 CHECK (probe_interval_ms >= 0),
    probe_by          TEXT    NOT NULL DEFAULT '',
    paused_until      INTEGER
);

CREATE TABLE {{prefix}}leader (
    name       TEXT    PRIMARY KEY,
    instance   TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
