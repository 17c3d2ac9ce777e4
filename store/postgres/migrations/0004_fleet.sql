-- The fleet's shared state (fleet.go): each destination's circuit, and the
-- maintenance leader's lease.
CREATE TABLE {{T}}circuits (
	destination    text PRIMARY KEY,
	open           boolean NOT NULL DEFAULT false,
	opened_by      text NOT NULL DEFAULT '',
	opened_at      timestamptz,
	next_probe     timestamptz,
	probe_interval bigint NOT NULL DEFAULT 0 CHECK (probe_interval >= 0), -- microseconds
	probe_by       text NOT NULL DEFAULT '',
	paused_until   timestamptz
);

CREATE TABLE {{T}}leader (
	name       text PRIMARY KEY,
	instance   text NOT NULL,
	expires_at timestamptz NOT NULL
);
