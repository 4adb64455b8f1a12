package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// Spares: what a cold start spends laying out a sandbox's directory before its runtime runs, made
// ahead. A spare is such a directory with no sandbox yet: a uid range of its own with the holder of its
// user namespace already made (runc), and a disk of the default size copied, attached and mounted
// (≈4.5 ms and ≈2 ms of a cold create; docs/performance.md). Config.Spares of them wait under
// <state>/pool, each named "spare-<random>". A sandbox with the default disk that starts a container
// of its own (the warm pool empty, or off), and a new warm pool entry, take one: its metadata is
// rewritten to name its new owner, then its directory is renamed into place (the disk's mount moves
// with it), and the runtime runs as after layOut. A taken spare is replaced in the background once the
// allocation that took it is done.
//
// Invariant, as for the pool: a spare is in p.spares.idle and under <state>/pool while it waits; once
// taken, it is its owner's directory. A crash between the two leaves it under <state>/pool, which a
// starting provider empties; its holder, a child of the daemon waiting on a pipe from it, ends with
// the daemon. A spare owns no cgroup and no container, so removing one touches neither.

type spares struct {
	mu   sync.Mutex
	idle []spare
	kick chan struct{} // wakes the filler
}

type spare struct {
	l  layout
	m  meta       // its uid range and disk, no owner
	ns *pendingNS // the holder of its user namespace, made (runc); nil on gVisor
}

const sparePrefix = "spare-"

// fillSpares keeps Config.Spares spares idle until ctx ends, backing off as the pool's filler does when
// one cannot be made.
func (p *Provider) fillSpares(ctx context.Context) {
	p.keepFilled(ctx, "laying out a spare sandbox directory", p.spares.kick, func() bool {
		p.spares.mu.Lock()
		defer p.spares.mu.Unlock()
		return len(p.spares.idle) < p.cfg.Spares
	}, func() error {
		s, err := p.makeSpare(ctx)
		if err == nil {
			p.spares.mu.Lock()
			p.spares.idle = append(p.spares.idle, s)
			p.spares.mu.Unlock()
		}
		return err
	})
}

// makeSpare lays out one spare. On failure it leaves nothing behind.
func (p *Provider) makeSpare(ctx context.Context) (spare, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	l := layout{dir: filepath.Join(p.pool.dir, sparePrefix+hex.EncodeToString(rnd[:]))}
	m, ns, err := p.layOut(ctx, l, meta{Resources: sandbox.Resources{DiskMiB: p.cfg.DefaultDiskMiB}, Disk: true}, true)
	if err == nil && ns != nil {
		_, err = ns.wait() // a spare whose holder failed would fail its sandbox
	}
	s := spare{l: l, m: m, ns: ns}
	if err != nil {
		if rerr := p.discardSpare(context.WithoutCancel(ctx), s); rerr != nil {
			p.log.Error("removing a spare that failed to be made", "dir", l.dir, "err", rerr)
		}
		return spare{}, err
	}
	return s, nil
}

// takeSpare lays out l for m, whose disk is of the default size, from an idle spare, and returns m
// with the spare's uid range, and the holder of its user namespace (nil on gVisor). It returns false,
// with nothing done, when no spare is idle or m needs another disk; the caller then lays out l itself.
func (p *Provider) takeSpare(l layout, m meta) (meta, *pendingNS, bool) {
	if p.cfg.Spares == 0 || !m.Disk || m.Resources.DiskMiB != p.cfg.DefaultDiskMiB {
		return m, nil, false
	}
	for {
		p.spares.mu.Lock()
		if len(p.spares.idle) == 0 {
			p.spares.mu.Unlock()
			return m, nil, false
		}
		s := p.spares.idle[0]
		p.spares.idle = p.spares.idle[1:]
		p.spares.mu.Unlock()

		m.IDBase = s.m.IDBase
		err := writeJSONFile(s.l.meta(), m)
		if err == nil {
			// Never over a directory that exists: l's is its owner's alone.
			err = unix.Renameat2(unix.AT_FDCWD, s.l.dir, unix.AT_FDCWD, l.dir, unix.RENAME_NOREPLACE)
		}
		if err == nil {
			return m, s.ns, true
		}
		p.log.Warn("a spare sandbox directory is unusable; discarding it", "dir", s.l.dir, "err", err)
		if rerr := p.discardSpare(context.Background(), s); rerr != nil {
			p.log.Error("discarding a spare", "dir", s.l.dir, "err", rerr)
		}
		if errors.Is(err, unix.EEXIST) {
			return m, nil, false // layOut says what is in the way
		}
	}
}

// refillSpares wakes the filler to replace taken spares. Allocate calls it once its sandbox is ready,
// so that laying out the replacement does not compete with the allocation that took one.
func (p *Provider) refillSpares() {
	select {
	case p.spares.kick <- struct{}{}:
	default:
	}
}

// discardSpare ends s's holder and removes its disk and directory, and gives its uid range back.
func (p *Provider) discardSpare(ctx context.Context, s spare) error {
	if s.ns != nil {
		s.ns.release()
	}
	return p.removeSpareDir(ctx, s.l)
}

// removeSpareDir removes the spare directory l, found by name: its layout, and its uid range given
// back. Nothing else is the spare's: its metadata may name a sandbox that took it when a crash cut the
// take short, whose cgroups are not the spare's to remove.
func (p *Provider) removeSpareDir(ctx context.Context, l layout) error {
	m, err := readMetaFile(l)
	return p.removeLayout(ctx, l, m, err == nil)
}

// isSpareDir tells a spare's directory under <state>/pool from a pool entry's.
func isSpareDir(name string) bool { return strings.HasPrefix(name, sparePrefix) }

// closeSpares discards every idle spare; the filler has stopped.
func (p *Provider) closeSpares() error {
	p.spares.mu.Lock()
	idle := p.spares.idle
	p.spares.idle = nil
	p.spares.mu.Unlock()
	var errs []error
	for _, s := range idle {
		if err := p.discardSpare(context.Background(), s); err != nil {
			errs = append(errs, fmt.Errorf("oci: removing spare %s: %w", s.l.dir, err))
		}
	}
	return errors.Join(errs...)
}
