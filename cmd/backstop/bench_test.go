package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/testenv"
)

// backstop bench runs the scenarios at the small scale on each store,
// Backstop beside raw SQL, every message checked, and reports them.
func TestBenchSmallScale(t *testing.T) {
	t.Parallel()
	stores := map[string]string{"sqlite": ""}
	if !testing.Short() {
		testenv.PostgresAdmin(t)
		stores["postgres"] = testenv.PostgresURL()
	}
	for name, db := range stores {
		t.Run(name, func(t *testing.T) {
			args := []string{"bench", "--scale", "small", "--scenarios", "enqueue-1,drain,work-ordered,latency"}
			if db != "" {
				args = append(args, "--db", db)
			}
			out := mustCLI(t, args...)
			// backstop on every scenario, raw SQL where it has the case
			for _, row := range []string{`enqueue-1\s+backstop\s+\d+`, `enqueue-1\s+raw\s+\d+`, `drain\s+backstop\s+\d+`,
				`drain\s+raw\s+\d+`, `work-ordered\s+backstop\s+\d+`, `latency\s+backstop\s+\d+\s+\d+\.\d+`} {
				if !regexp.MustCompile(row + `.*\bok\b`).MatchString(out) {
					t.Errorf("no row %q with its checks ok in:\n%s", row, out)
				}
			}
			if regexp.MustCompile(`(?m)^(work-ordered|latency)\s+raw`).MatchString(out) {
				t.Errorf("raw SQL ran a case it has no version of:\n%s", out)
			}
			if !regexp.MustCompile(`(?m)^drain\s+\d+\.\d+x`).MatchString(out) || strings.Contains(out, "FAILED") {
				t.Errorf("no drain ratio, or a failure:\n%s", out)
			}
		})
	}
}

func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--scenarios", "drain,sprint"}, `--scenarios: unknown "sprint"`},
		{[]string{"bench", "--systems", "river"}, `--systems: unknown "river"`},
		{[]string{"bench", "--scale", "huge"}, `--scale: unknown scale "huge"`},
		{[]string{"bench", "--rounds", "0"}, "--rounds must be at least 1"},
		{[]string{"bench", "--scenarios", ","}, "--scenarios is empty"},
		{[]string{"bench", "--scale", "small", "--scenarios", "enqueue-1", "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.prof")}, "--cpuprofile: open"},
	} {
		_, err := cli(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// --cpuprofile writes a profile go tool pprof reads: gzip-compressed, as
// runtime/pprof writes it.
func TestBenchWritesACPUProfile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cpu.prof")
	out := mustCLI(t, "bench", "--scale", "small", "--scenarios", "enqueue-1", "--systems", "backstop", "--cpuprofile", path)
	if !regexp.MustCompile(`enqueue-1\s+backstop\s+\d+.*\bok\b`).MatchString(out) {
		t.Errorf("no enqueue-1 row with its checks ok in:\n%s", out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("%s is not a gzip-compressed profile: %d bytes, starting %q", path, len(b), b[:min(len(b), 8)])
	}
}
