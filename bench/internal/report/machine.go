// Package report turns a benchmark run into Markdown: the machine, the
// absolute figures of every case, the per-round ratios of Backstop to
// River and to the raw SQL baselines with their spread, and the targets
// Backstop must meet, each met or missed.
package report

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // for sqlite_version()
)

// Machine describes where the benchmark ran.
type Machine struct {
	CPU, Memory, Kernel, Go, SQLite, Commit string
	Cores                                   int
	// Postgres holds the server's version and the settings that decide
	// commit cost, in the order shown; empty when PostgreSQL was not used.
	Postgres [][2]string
}

// Gather reads the machine's description: /proc, the Go runtime, the
// PostgreSQL server at url (when withPostgres), SQLite and the repository.
func Gather(ctx context.Context, url string, withPostgres bool) Machine {
	m := Machine{Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	m.CPU, m.Cores = cpuInfo()
	m.Memory = memTotal()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if withPostgres {
		m.Postgres = postgresInfo(ctx, url)
	}
	if db, err := sql.Open("sqlite", ":memory:"); err == nil {
		_ = db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&m.SQLite)
		db.Close()
		m.SQLite += " (modernc.org/sqlite, pure Go)"
	}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m.Commit += " (with uncommitted changes)"
		}
	}
	return m
}

func cpuInfo() (model string, cores int) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown", runtime.NumCPU()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		case "processor":
			cores++
		}
	}
	return model, cores
}

func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int64
		if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}

func postgresInfo(ctx context.Context, url string) [][2]string {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return [][2]string{{"error", err.Error()}}
	}
	defer conn.Close(ctx)
	var out [][2]string
	for _, q := range []struct{ name, sql string }{
		{"version", "SELECT version()"},
		{"synchronous_commit", "SHOW synchronous_commit"},
		{"fsync", "SHOW fsync"},
		{"wal_sync_method", "SHOW wal_sync_method"},
		{"autovacuum", "SHOW autovacuum"},
		{"shared_buffers", "SHOW shared_buffers"},
		{"max_connections", "SHOW max_connections"},
	} {
		var v string
		if err := conn.QueryRow(ctx, q.sql).Scan(&v); err != nil {
			v = "error: " + err.Error()
		}
		out = append(out, [2]string{q.name, v})
	}
	return out
}
