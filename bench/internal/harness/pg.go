package harness

import (
	"fmt"
	"hash/fnv"
	"os"
)

// schemaPrefix starts the name of every schema the benchmark creates, so
// that leftovers of a killed run can be found and dropped.
const schemaPrefix = "backstop_bench_"

// schemaFor names the schema of case c in round r, with this process's
// id so that two runs at once do not collide; short, because River takes
// schema names of at most 46 characters.
func schemaFor(c Case, round int) string {
	h := fnv.New32a()
	h.Write([]byte(c.Name()))
	return fmt.Sprintf("%s%d_%08x_r%d", schemaPrefix, os.Getpid(), h.Sum32(), round+1)
}
