package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"
)

// Checkpoints copy the WAL's pages back into the database file, so that the WAL can start over. SQLite
// runs them inside the commit that crosses its threshold (1000 pages), and that commit then waits for
// megabytes of writes and an fsync: one append in a few hundred took 15-20 ms instead of 50 µs. The
// store turns that off and checkpoints from a goroutine of its own, on a connection of its own, beside
// the writes: a PASSIVE checkpoint blocks neither writers nor readers. The WAL starts over at the first
// write after a checkpoint that copied every frame; under writes that never pause, frames appended
// during each checkpoint keep that from happening, so once the WAL passes checkpointMaxFrames the
// checkpointer copies what is left while it holds the store's write lock, briefly: most frames are in
// the file already.
const (
	// checkpointEvery is how many commits make the checkpointer run: with the two to four pages a
	// commit writes, about SQLite's own threshold.
	checkpointEvery = 300
	// checkpointIdle is how soon a WAL that fewer commits left behind is checkpointed anyway.
	checkpointIdle = 5 * time.Second
	// checkpointMaxFrames is the WAL length (16 MiB of pages) past which writes wait for a checkpoint.
	checkpointMaxFrames = 4000
)

// checkpointer runs PASSIVE checkpoints on db when kicked, and every checkpointIdle while commits
// are pending.
type checkpointer struct {
	db      *sql.DB
	writes  sync.Locker  // held by every write transaction
	commits atomic.Int64 // commits since the last checkpoint began
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

func startCheckpointer(db *sql.DB, writes sync.Locker) *checkpointer {
	c := &checkpointer{db: db, writes: writes, kick: make(chan struct{}, 1), done: make(chan struct{})}
	c.wg.Add(1)
	go c.loop()
	return c
}

// committed counts a commit and kicks the loop every checkpointEvery of them. It never blocks.
func (c *checkpointer) committed() {
	if c.commits.Add(1)%checkpointEvery == 0 {
		select {
		case c.kick <- struct{}{}:
		default: // a checkpoint is due already
		}
	}
}

func (c *checkpointer) loop() {
	defer c.wg.Done()
	idle := time.NewTicker(checkpointIdle)
	defer idle.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-c.kick:
		case <-idle.C:
			if c.commits.Load() == 0 {
				continue
			}
		}
		c.commits.Store(0)
		// Errors are not fatal: a checkpoint that could not finish (a reader still on old pages) is
		// retried at the next kick, and the WAL only grows meanwhile.
		if frames, err := c.checkpoint(); err == nil && frames > checkpointMaxFrames {
			// Without writers the checkpoint completes, and the next write starts the WAL over.
			c.writes.Lock()
			_, _ = c.checkpoint()
			c.writes.Unlock()
		}
	}
}

// checkpoint runs one PASSIVE checkpoint and returns the WAL's length in frames.
func (c *checkpointer) checkpoint() (frames int, err error) {
	var busy, copied int
	err = c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
	return frames, err
}

// stop ends the loop and waits for a checkpoint in progress.
func (c *checkpointer) stop() {
	close(c.done)
	c.wg.Wait()
}
