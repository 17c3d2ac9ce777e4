package store_test

import (
	"testing"
	"testing/fstest"

	"github.com/backstophq/backstop/store"
)

func TestLoadMigrationsOrdersAndChecksNames(t *testing.T) {
	good := fstest.MapFS{
		"m/0002_more.sql":  {Data: []byte("B")},
		"m/0001_first.sql": {Data: []byte("A")},
		"m/README.txt":     {Data: []byte("ignored")},
	}
	ms, err := store.LoadMigrations(good, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0] != (store.Migration{Version: 1, Name: "first", SQL: "A"}) || ms[1].Version != 2 {
		t.Fatalf("LoadMigrations = %+v", ms)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"no version":   {"m/first.sql": {}},
		"zero":         {"m/0000_x.sql": {}},
		"same version": {"m/0001_a.sql": {}, "m/01_b.sql": {}},
	} {
		if _, err := store.LoadMigrations(fsys, "m"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
