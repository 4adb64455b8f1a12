package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/netpolicy"
)

// The warm pool: Config.WarmPool containers started ahead of any request, each in its own directory
// under <state>/pool, named "pool-<random>" for runc and its cgroups, its agent answering. Allocating a
// sandbox whose disk is of the default size takes one (each entry starts with such a disk, its own uid
// range and no memory or CPU limit): its cgroups get the sandbox's memory and CPU limits, its
// metadata is rewritten to name the sandbox's generation (and the container's pool name), then its
// directory is renamed into <state>/sandboxes. (A disk of another size would be another ext4 image
// under /workspace's directory, which the entry's mounts fixed when it started.) The running
// container does not notice: its mounts hold the directories, not their paths, and the agent's socket
// stays bound to the same file. A taken entry is replaced in the background. Entries of an image, kept
// for sandboxes of that image, are made and taken the same way, on the image's root (imagepool.go).
// Some entries of the shared root's pool keep a network link made ahead, for sandboxes that need one
// (poolnet.go).
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
	entries
	dir  string
	stop context.CancelFunc
	done chan struct{} // closed when the fillers have returned
}

// entries are the idle entries of a pool: the shared root's, or an image's (imagepool.go).
type entries struct {
	mu   sync.Mutex
	idle []poolEntry
	kick chan struct{} // wakes the filler

	hits, misses atomic.Uint64 // claims that took an entry, and that found none idle
}

type poolEntry struct {
	name   string // runc's name
	l      layout
	client *agentclient.Client
	img    *imageInfo // the image it runs on (what its metadata records), nil on the shared root
	link   *entryLink // its network link made ahead (poolnet.go), nil: none
}

// take removes and returns the first idle entry ok accepts.
func (q *entries) take(ok func(poolEntry) bool) (poolEntry, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, e := range q.idle {
		if ok(e) {
			q.idle = slices.Delete(q.idle, i, i+1)
			return e, true
		}
	}
	return poolEntry{}, false
}

// putBack returns e, taken by a claim that gave up, to the front of the idle entries.
func (q *entries) putBack(e poolEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.idle = slices.Insert(q.idle, 0, e)
}

// add makes e idle.
func (q *entries) add(e poolEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.idle = append(q.idle, e)
}

// drain removes and returns every idle entry.
func (q *entries) drain() []poolEntry {
	q.mu.Lock()
	defer q.mu.Unlock()
	idle := q.idle
	q.idle = nil
	return idle
}

// linked is how many idle entries have a link.
func (q *entries) linked() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, e := range q.idle {
		if e.link != nil {
			n++
		}
	}
	return n
}

// count is how many entries are idle.
func (q *entries) count() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.idle)
}

// refill wakes the filler to replace a taken entry. Allocate calls it once its sandbox is ready, so
// that starting the replacement (a runc run, tens of milliseconds of CPU) does not compete with the
// allocation it replaces an entry for.
func (q *entries) refill() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// startPool discards what an earlier provider left in the pool directory and starts the fillers of the
// pool and of the spares (spare.go). With neither configured it only discards.
func (p *Provider) startPool() {
	ctx, cancel := context.WithCancel(context.Background())
	p.pool.kick = make(chan struct{}, 1)
	p.pool.stop = cancel
	p.pool.done = make(chan struct{})
	p.spares.kick = make(chan struct{}, 1)
	for _, q := range p.imagePools {
		q.kick = make(chan struct{}, 1)
	}
	go func() {
		defer close(p.pool.done)
		p.discardLeftovers(ctx)
		var fillers sync.WaitGroup
		if p.cfg.Spares > 0 {
			fillers.Go(func() { p.fillSpares(ctx) })
		}
		for _, q := range p.imagePools {
			fillers.Go(func() { p.fillImagePool(ctx, q) })
		}
		if p.cfg.WarmPool > 0 {
			p.fill(ctx)
		}
		fillers.Wait()
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
	idle := p.pool.drain()
	for _, q := range p.imagePools {
		idle = append(idle, q.drain()...)
	}
	var errs []error
	for _, e := range idle {
		if err := p.discardEntry(context.Background(), e); err != nil {
			errs = append(errs, fmt.Errorf("oci: removing pool entry %s: %w", e.name, err))
		}
	}
	// Once the entries' links are gone: the table goes when no sandbox has rules in it.
	errs = append(errs, p.closeSpares(), p.closeNetwork())
	if p.images != nil {
		errs = append(errs, p.images.store.Close()) // after the entries' holds are given up
	}
	return errors.Join(errs...)
}

// discardEntry removes the idle entry e, and its hold on its image.
func (p *Provider) discardEntry(ctx context.Context, e poolEntry) error {
	e.client.Close()
	if err := p.remove(ctx, e.l, e.name); err != nil {
		return err
	}
	return p.releaseEntryImage(e)
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

// fill keeps WarmPool entries idle until ctx ends, NetworkConfig.WarmPoolLinks of them with a link.
func (p *Provider) fill(ctx context.Context) {
	p.keepFilled(ctx, "starting a warm pool entry", p.pool.kick, func() bool {
		return p.pool.count() < p.cfg.WarmPool
	}, func() error {
		link := p.wantsLink()
		e, err := p.warm(ctx, nil)
		p.refillSpares() // the entry may have taken one
		if err != nil {
			return err
		}
		if link {
			if err = p.linkEntry(&e); err != nil {
				// The entry is kept without a link; the next one tries again, after the back-off.
				err = fmt.Errorf("its network link: %w", err)
				if uerr := p.unlinkEntry(&e); uerr != nil {
					p.log.Error("removing the link of a warm pool entry", "entry", e.name, "err", uerr)
					if derr := p.discardEntry(context.WithoutCancel(ctx), e); derr != nil {
						p.log.Error("discarding a pool entry", "entry", e.name, "err", derr)
					}
					return err
				}
			}
		}
		p.pool.add(e)
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

// warm starts one entry, on img when it is not nil (holding it in the store under the entry's name),
// and waits for its agent's answer. On failure it leaves nothing behind.
func (p *Provider) warm(ctx context.Context, img *imageInfo) (poolEntry, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	name := "pool-" + hex.EncodeToString(rnd[:])
	e := poolEntry{name: name, l: layout{dir: filepath.Join(p.pool.dir, name)}, img: img}
	var err error
	if img != nil {
		_, err = p.images.store.Acquire(img.Digest, name)
	}
	var m meta
	var ns *pendingNS
	if err == nil {
		res := sandbox.Resources{DiskMiB: p.cfg.DefaultDiskMiB}
		m, ns, err = p.lay(ctx, e.l, meta{Container: name, CgroupPath: p.cgroupPath(name), Resources: res, Disk: true, Image: img})
	}
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
		rerr := p.remove(context.WithoutCancel(ctx), e.l, name)
		if rerr == nil {
			rerr = p.releaseEntryImage(e) // when no metadata recorded the hold
		}
		if rerr != nil {
			p.log.Error("removing a pool entry that failed to start", "entry", name, "err", rerr)
		}
		return poolEntry{}, err
	}
	return e, nil
}

// claim makes an idle entry the container of b, whose directory does not exist yet, with the memory and
// CPU limits of res (whose disk is of the default size): an entry of the shared root when img is nil,
// else one of an image pool whose entries run img's digest (imagepool.go), whose hold on the image
// becomes b's (takeEntryHold; held: b holds img already). It returns false, and b untouched (holding
// img only if it did), when no such entry is idle or the one taken does not answer or take the limits;
// the caller then starts a container of its own. After a true, the caller calls refill(img) once it
// is done.
//
// A sandbox under rules that need a network takes an entry with a link when one is idle (one whose
// rules need none never does): its rules are in effect on the link already when they are the
// entry's, and are put in effect while the entry is made the sandbox's otherwise (openLink); opening,
// once claim has returned true, tells when they are, and whether they could not be (then the caller
// releases the sandbox). Until they are, the link has the entry's policy or none, while nothing of the
// sandbox's runs yet. Otherwise opening stays nil.
func (p *Provider) claim(ctx context.Context, b *box, res sandbox.Resources, img *imageInfo, held bool, rules netpolicy.Rules, opening *<-chan error) bool {
	p.expectRules(rules)
	for {
		e, q, ok := p.takeEntry(img, rules.Needs())
		if !ok {
			return false
		}
		var open, recorded chan error
		var err error
		switch {
		case e.link != nil && e.link.under(rules):
			// In effect and recorded already: the uplinks' forwarding only, turned on once.
			open = make(chan error, 1)
			open <- p.recordLink(e, rules)
		case e.link != nil:
			// Both beside the health check: net.json must name the rules before the directory is
			// the sandbox's (below), and the rules must be in effect before the sandbox is ready
			// (the caller waits for opening).
			open, recorded = make(chan error, 1), make(chan error, 1)
			go func() { open <- p.openLink(e, rules) }()
			go func() { recorded <- p.recordLink(e, rules) }()
		}
		hctx, cancel := context.WithTimeout(ctx, min(p.cfg.CallTimeout, time.Second))
		_, err = e.client.Health(hctx)
		cancel()
		if err != nil && ctx.Err() != nil && open == nil {
			// The caller gave up, not the entry: it goes back for the next one.
			q.putBack(e)
			return false
		}
		e.client.Close()
		if err == nil && open != nil {
			// A failure to open now, before the directory is the sandbox's, discards the entry.
			select {
			case err = <-open:
				open <- err // for the caller
			default:
			}
		}
		if err == nil {
			err = setLimits(p.cgroupPath(e.name), res)
		}
		var m meta
		if err == nil {
			m, err = readMetaFile(e.l) // the entry's uid range, disk and image stay the sandbox's
		}
		if err == nil {
			m.Ref, m.Resources = b.ref, res
			if img != nil {
				m.Image = img // the sandbox's own reference, of the entry's digest
			}
			err = writeJSONFile(e.l.meta(), m)
		}
		if recorded != nil {
			if rerr := <-recorded; err == nil {
				err = rerr
			}
		}
		if err == nil && img != nil {
			// Before the directory is the sandbox's: a crash between leaves a hold by a name no
			// directory has, which the next start gives up (openImages), and the entry, discarded then.
			err = p.takeEntryHold(b.ref, e, img, held)
		}
		if err == nil {
			err = os.Rename(e.l.dir, b.l.dir)
			if err != nil && img != nil && !held {
				p.images.store.Release(img.Digest, b.ref.Name())
			}
		}
		if err == nil {
			if img != nil {
				p.knowImage(b.ref.Name(), img)
			}
			q.hits.Add(1)
			b.cid.Store(&e.name)
			p.log.Debug("sandbox takes a warm pool entry", "sandbox", b.ref, "entry", e.name)
			if open != nil {
				*opening = open
			}
			return true
		}
		if open != nil {
			<-open // before its rules are removed
		}
		p.log.Warn("a warm pool entry is unusable; discarding it", "entry", e.name, "err", err)
		if rerr := p.discardEntry(context.WithoutCancel(ctx), e); rerr != nil {
			p.log.Error("discarding a pool entry", "entry", e.name, "err", rerr)
		}
		q.refill()
		if ctx.Err() != nil {
			return false
		}
	}
}

// takeEntry takes an idle entry for a sandbox of img (nil: the shared root), and returns the entries it
// came from. Without one, it counts a miss where a pool is there to serve img. A sandbox that needs a
// network (needs) takes one with a link first; one that needs none never does.
func (p *Provider) takeEntry(img *imageInfo, needs bool) (poolEntry, *entries, bool) {
	if img == nil {
		var e poolEntry
		ok := false
		if needs {
			e, ok = p.pool.take(func(e poolEntry) bool { return e.link != nil })
		}
		if !ok {
			e, ok = p.pool.take(func(e poolEntry) bool { return e.link == nil })
		}
		if !ok && p.cfg.WarmPool > 0 {
			p.pool.misses.Add(1)
		}
		return e, &p.pool.entries, ok
	}
	var serves *imagePool
	for _, q := range p.imagePools {
		if e, ok := q.take(func(e poolEntry) bool { return e.img.Digest == img.Digest }); ok {
			return e, &q.entries, true
		}
		if serves == nil && q.serves(img.Digest) {
			serves = q
		}
	}
	if serves != nil {
		serves.misses.Add(1)
	}
	return poolEntry{}, nil, false
}

// refill wakes the filler of the pool a sandbox of img (nil: the shared root) took an entry of
// (entries.refill); of an image, every image pool's, as the filler of a full one only looks and waits.
func (p *Provider) refill(img *imageInfo) {
	if img == nil {
		p.pool.refill()
		return
	}
	for _, q := range p.imagePools {
		q.refill()
	}
}

// idleEntries is how many entries wait in the shared root's pool.
func (p *Provider) idleEntries() int { return p.pool.count() }

// PoolStats says how full the warm pools are, the shared root's and the images' together, and how
// often a create found an entry (sandbox.PoolReporter).
func (p *Provider) PoolStats() sandbox.PoolStats {
	s := sandbox.PoolStats{
		Idle: p.idleEntries(), Target: p.cfg.WarmPool,
		Hits: p.pool.hits.Load(), Misses: p.pool.misses.Load(),
	}
	for _, q := range p.imagePools {
		s.Idle += q.count()
		s.Target += q.cfg.Size
		s.Hits += q.hits.Load()
		s.Misses += q.misses.Load()
	}
	return s
}
