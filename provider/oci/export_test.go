package oci

// CgroupPrefix begins the name of every cgroup a provider on stateDir makes, for the tests.
func CgroupPrefix(stateDir string) string { return "sandboxd-" + cgroupTag(stateDir) + "-" }

// IdleEntries is how many warm pool entries wait, for the tests.
func IdleEntries(p *Provider) int { return p.idleEntries() }

// Abandon stops the warm pool's filler and forgets its idle entries without removing them: what a
// provider that dies leaves behind.
func Abandon(p *Provider) {
	p.pool.stop()
	<-p.pool.done
	p.pool.mu.Lock()
	for _, e := range p.pool.idle {
		e.client.Close()
	}
	p.pool.idle = nil
	p.pool.mu.Unlock()
}
