package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/backstophq/backstop/store"
)

// fileGone returns an error matching store.ErrUnavailable when a file the
// store opened is no longer at its path: removed (rm backstop.db*), or
// another file moved over it (a backup restored with mv). SQLite goes on
// with the file it has open, which no other process sees and which is
// lost when this one exits: the store went on taking messages into it,
// claiming them, and answering serve's readiness check, while a backstop
// --db command found an empty database at the path. An error other than
// the path's absence (a directory this process may no longer search) says
// nothing either way and is not reported.
//
// The database's -wal and -shm files are watched as well. The -wal file
// holds what was committed since SQLite last copied it into the database
// (a checkpoint): removed, the store went on committing into it, a kill
// of the process lost all of it (35 messages reported committed, and the
// schema, in a database opened just before), and another process could
// not read the database (disk I/O error). The first time the store finds
// it gone, it copies what it holds into the database (rescueLog). The
// -shm file is the log's index, and its locks: removed, a process opening
// the database next made an index of its own, the two processes' writes
// overwrote each other's in the -wal file, and a message one of them
// reported committed was lost (5 of 40).
func (s *Store) fileGone(ctx context.Context) error {
	if s.file == nil {
		return nil
	}
	if what := moved(s.path, s.file); what != "" {
		return fmt.Errorf("%w: sqlite: the database file %s %s while this store had it open: "+
			"what it writes goes to the file it opened, which no other process sees and which is lost when this "+
			"process exits; stop it, put the database back and start again", store.ErrUnavailable, s.path, what)
	}
	shm := moved(s.path+"-shm", s.shm)
	if wal := moved(s.path+"-wal", s.wal); wal != "" {
		saved := "stop this process with SIGTERM, not kill -9: its close copies them into the database"
		if shm != "was replaced by another file" {
			// No other process has made an index of its own: the log and
			// its index are this process's, and copying the log into the
			// database is what its close would do.
			if err := s.rescueLog(ctx); err != nil {
				saved = fmt.Sprintf("copying them into the database failed (%v): %s", err, saved)
			} else {
				saved = "the store copied them into the database file, which holds every committed message; " +
					"stop this process and start again"
			}
		}
		return fmt.Errorf("%w: sqlite: the database's -wal file %s-wal %s while this store had it open: "+
			"it held the messages committed since SQLite last copied it into the database, and what the store "+
			"writes would go into it, which no other process sees; %s", store.ErrUnavailable, s.path, wal, saved)
	}
	if shm != "" {
		return fmt.Errorf("%w: sqlite: the database's -shm file %s-shm %s while this store had it open: "+
			"a process that opens the database now makes an index and locks of its own, and what the two write "+
			"overwrites each other's; stop this process and start again", store.ErrUnavailable, s.path, shm)
	}
	return nil
}

// moved says how the file at name is no longer the one fi describes ("was
// removed", "was replaced by another file"), or "" when it still is, when
// fi is nil (the file was not watched), or when a look says nothing either
// way.
func moved(name string, fi os.FileInfo) string {
	if fi == nil {
		return ""
	}
	now, err := os.Stat(name)
	switch {
	case err == nil && os.SameFile(now, fi):
		return ""
	case err == nil:
		return "was replaced by another file"
	case errors.Is(err, fs.ErrNotExist):
		return "was removed"
	}
	return ""
}

// rescueLog copies the log the writer connection has open, whose -wal
// file is no longer at its path, into the database file and empties it
// (a TRUNCATE checkpoint), once: the database file then holds every
// message committed, which a kill of the process would otherwise lose,
// and another process that opens it reads them.
func (s *Store) rescueLog(ctx context.Context) error {
	if s.rescued.Load() {
		return nil
	}
	if err := s.awaitTurn(ctx, time.Now()); err != nil {
		return err
	}
	defer s.turns.Release(1)
	if s.rescued.Load() {
		return nil
	}
	acquire, cancel := context.WithTimeout(ctx, s.lockWait)
	defer cancel()
	conn, err := s.w.Conn(acquire)
	if err != nil {
		return err
	}
	defer conn.Close()
	var busy, logged, copied int
	if err := conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logged, &copied); err != nil {
		return err
	}
	if busy != 0 {
		return fmt.Errorf("a reader kept %d of the log's %d pages from being copied", logged-copied, logged)
	}
	s.rescued.Store(true)
	return nil
}
