package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
)

// The warm pool: Config.WarmPool containers started ahead of any request, each in its own directory
// under <state>/pool, named "pool-<random>" for runc and its cgroups, its agent answering. Allocating a
// sandbox whose disk is of the default size takes one (each entry starts with such a disk, its own uid
// range and no memory or CPU limit): its cgroups get the sandbox's memory and CPU limits, its
// metadata is rewritten to name the sandbox's generation (and the container's pool name), then its
// directory is renamed into <state>/sandboxes. (A disk of another size would be another ext4 image
// under /workspace's directory, which the entry's mounts fixed when it started.) The running
// container does not notice: its mounts hold the directories, not their paths, and the agent's socket
// stays bound to the same file. A taken entry is replaced in the background.
//
// Invariant: an entry is in exactly one place. In p.pool.idle and under <state>/pool while it waits;
// under <state>/sandboxes, with metadata naming its generation, once taken. A crash between the two
// steps leaves it under <state>/pool, and every directory there is discarded when a provider starts
// (before it warms new entries) or closes, so nothing of the pool outlives the provider that made it
// for longer than the next start.

// After it failed to start an entry, the pool waits poolRetry, doubled after each failure in a row up
// to poolRetryMax: a machine where containers cannot start at all (the pool is on by default) gets a
// warning a minute, not one a second.
const (
	poolRetry    = time.Second
	poolRetryMax = time.Minute
)

type pool struct {
	dir string

	mu   sync.Mutex
	idle []poolEntry
	kick chan struct{} // wakes the filler
	stop context.CancelFunc
	done chan struct{} // closed when the filler has returned

	hits, misses atomic.Uint64 // claims that took an entry, and that found none idle
}

type poolEntry struct {
	name   string // runc's name
	l      layout
	client *agentclient.Client
}

// startPool discards what an earlier provider left in the pool directory and starts the fillers of the
// pool and of the spares (spare.go). With neither configured it only discards.
func (p *Provider) startPool() {
	ctx, cancel := context.WithCancel(context.Background())
	p.pool.kick = make(chan struct{}, 1)
	p.pool.stop = cancel
	p.pool.done = make(chan struct{})
	p.spares.kick = make(chan struct{}, 1)
	go func() {
		defer close(p.pool.done)
		p.discardLeftovers(ctx)
		var spares sync.WaitGroup
		if p.cfg.Spares > 0 {
			spares.Go(func() { p.fillSpares(ctx) })
		}
		if p.cfg.WarmPool > 0 {
			p.fill(ctx)
		}
		spares.Wait()
	}()
}

// Close stops the fillers and removes the pool entries and spares no sandbox took. Sandboxes are not touched
// (gVisor's keep the network namespace runsc pinned for them; only the pin goes).
func (p *Provider) Close() error {
	p.pool.stop()
	<-p.pool.done
	if p.runc.class == classGVisor {
		unmountNullNetNS(p.runc.root)
	}
	unmountRoot(p.cfg.StateDir) // the sandboxes' mounts of it live on
	p.pool.mu.Lock()
	idle := p.pool.idle
	p.pool.idle = nil
	p.pool.mu.Unlock()
	errs := []error{p.closeSpares(), p.closeNetwork()}
	for _, e := range idle {
		e.client.Close()
		if err := p.remove(context.Background(), e.l, e.name); err != nil {
			errs = append(errs, fmt.Errorf("oci: removing pool entry %s: %w", e.name, err))
		}
	}
	return errors.Join(errs...)
}

// discardLeftovers removes every directory in the pool directory: entries and spares of an earlier
// provider, or one whose take was cut short.
func (p *Provider) discardLeftovers(ctx context.Context) {
	ents, err := os.ReadDir(p.pool.dir)
	if err != nil {
		p.log.Warn("listing the warm pool", "err", err)
		return
	}
	for _, e := range ents {
		if ctx.Err() != nil {
			return
		}
		l := layout{dir: filepath.Join(p.pool.dir, e.Name())}
		if isSpareDir(e.Name()) {
			if err := p.removeSpareDir(ctx, l); err != nil {
				p.log.Warn("discarding a spare left by an earlier run", "spare", e.Name(), "err", err)
			}
			continue
		}
		if err := p.remove(ctx, l, e.Name()); err != nil {
			p.log.Warn("discarding a pool entry left by an earlier run", "entry", e.Name(), "err", err)
			continue
		}
		p.mu.Lock()
		delete(p.found, e.Name())
		p.mu.Unlock()
	}
}

// fill keeps WarmPool entries idle until ctx ends.
func (p *Provider) fill(ctx context.Context) {
	p.keepFilled(ctx, "starting a warm pool entry", p.pool.kick, func() bool {
		p.pool.mu.Lock()
		defer p.pool.mu.Unlock()
		return len(p.pool.idle) < p.cfg.WarmPool
	}, func() error {
		e, err := p.warm(ctx)
		p.refillSpares() // the entry may have taken one
		if err == nil {
			p.pool.mu.Lock()
			p.pool.idle = append(p.pool.idle, e)
			p.pool.mu.Unlock()
		}
		return err
	})
}

// keepFilled runs add while short says more is wanted, and waits for kick once nothing is, until ctx
// ends. After an add that failed it waits poolRetry, doubled after each failure in a row up to
// poolRetryMax, and logs what failed as doing.
func (p *Provider) keepFilled(ctx context.Context, doing string, kick <-chan struct{}, short func() bool, add func() error) {
	retry := poolRetry
	for {
		if !short() {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			}
			continue
		}
		err := add()
		if err == nil {
			retry = poolRetry
			continue
		}
		if ctx.Err() != nil {
			return
		}
		p.log.Warn(doing, "err", err, "retry_in", retry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, poolRetryMax)
	}
}

// warm starts one entry and waits for its agent's answer. On failure it leaves nothing behind.
func (p *Provider) warm(ctx context.Context) (poolEntry, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	name := "pool-" + hex.EncodeToString(rnd[:])
	e := poolEntry{name: name, l: layout{dir: filepath.Join(p.pool.dir, name)}}
	res := sandbox.Resources{DiskMiB: p.cfg.DefaultDiskMiB}
	m, ns, err := p.lay(ctx, e.l, meta{Container: name, CgroupPath: p.cgroupPath(name), Resources: res, Disk: true})
	var settled <-chan struct{}
	if err == nil {
		settled, err = p.start(ctx, e.l, m, name, ns)
	}
	if err == nil {
		e.client = agentclient.New(dialAgent(e.l))
		hctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
		_, err = e.client.Health(hctx)
		cancel()
		<-settled // before the entry's directory can be renamed or removed
		if err != nil {
			e.client.Close()
		}
	}
	if err != nil {
		if rerr := p.remove(context.WithoutCancel(ctx), e.l, name); rerr != nil {
			p.log.Error("removing a pool entry that failed to start", "entry", name, "err", rerr)
		}
		return poolEntry{}, err
	}
	return e, nil
}

// claim makes an idle entry the container of b, whose directory does not exist yet, with the memory and
// CPU limits of res (whose disk is of the default size). It returns false, and b untouched, when no
// entry is idle or the one taken does not answer or take the limits; the caller then starts a container
// of its own. After a true, the caller calls refill once it is done.
func (p *Provider) claim(ctx context.Context, b *box, res sandbox.Resources) bool {
	for {
		p.pool.mu.Lock()
		if len(p.pool.idle) == 0 {
			p.pool.mu.Unlock()
			if p.cfg.WarmPool > 0 {
				p.pool.misses.Add(1)
			}
			return false
		}
		e := p.pool.idle[0]
		p.pool.idle = p.pool.idle[1:]
		p.pool.mu.Unlock()

		hctx, cancel := context.WithTimeout(ctx, min(p.cfg.CallTimeout, time.Second))
		_, err := e.client.Health(hctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			// The caller gave up, not the entry: it goes back for the next one.
			p.pool.mu.Lock()
			p.pool.idle = append([]poolEntry{e}, p.pool.idle...)
			p.pool.mu.Unlock()
			return false
		}
		e.client.Close()
		if err == nil {
			err = setLimits(p.cgroupPath(e.name), res)
		}
		var m meta
		if err == nil {
			m, err = readMetaFile(e.l) // the entry's uid range and disk stay the sandbox's
		}
		if err == nil {
			m.Ref, m.Resources = b.ref, res
			if err = writeJSONFile(e.l.meta(), m); err == nil {
				err = os.Rename(e.l.dir, b.l.dir)
			}
		}
		if err == nil {
			p.pool.hits.Add(1)
			b.cid.Store(&e.name)
			p.log.Debug("sandbox takes a warm pool entry", "sandbox", b.ref, "entry", e.name)
			return true
		}
		p.log.Warn("a warm pool entry is unusable; discarding it", "entry", e.name, "err", err)
		if rerr := p.remove(context.WithoutCancel(ctx), e.l, e.name); rerr != nil {
			p.log.Error("discarding a pool entry", "entry", e.name, "err", rerr)
		}
		p.refill()
		if ctx.Err() != nil {
			return false
		}
	}
}

// refill wakes the filler to replace a taken entry. Allocate calls it once its sandbox is ready, so that
// starting the replacement (a runc run, tens of milliseconds of CPU) does not compete with the
// allocation it replaces an entry for.
func (p *Provider) refill() {
	select {
	case p.pool.kick <- struct{}{}:
	default:
	}
}

// idleEntries is how many entries wait in the pool.
func (p *Provider) idleEntries() int {
	p.pool.mu.Lock()
	defer p.pool.mu.Unlock()
	return len(p.pool.idle)
}

// PoolStats says how full the warm pool is and how often a create found an entry
// (sandbox.PoolReporter).
func (p *Provider) PoolStats() sandbox.PoolStats {
	return sandbox.PoolStats{
		Idle: p.idleEntries(), Target: p.cfg.WarmPool,
		Hits: p.pool.hits.Load(), Misses: p.pool.misses.Load(),
	}
}
