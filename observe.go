package sandbox

import "context"

// PoolStats is what a provider's warm pool says of itself.
type PoolStats struct {
	Idle   int    // started containers waiting to be taken
	Target int    // how many the pool keeps started
	Hits   uint64 // creates that took an entry
	Misses uint64 // creates the pool could have served that found it empty
}

// PoolReporter is implemented by a provider with a warm pool.
type PoolReporter interface {
	PoolStats() PoolStats
}

// PruneReporter is implemented by a store that can say up to which cursor it has pruned its log: the
// oldest event it retains is the one after.
type PruneReporter interface {
	Pruned(ctx context.Context) (int64, error)
}

// Usage is what one sandbox generation uses now, as its provider reads it. A nil field is a figure
// the provider cannot read.
type Usage struct {
	CPUSeconds       *float64 `json:"cpuSeconds,omitempty"`
	MemoryBytes      *int64   `json:"memoryBytes,omitempty"`
	MemoryPeakBytes  *int64   `json:"memoryPeakBytes,omitempty"`
	MemoryLimitBytes *int64   `json:"memoryLimitBytes,omitempty"`
	Pids             *int64   `json:"pids,omitempty"`
	PidsLimit        *int64   `json:"pidsLimit,omitempty"`
	DiskBytes        *int64   `json:"diskBytes,omitempty"`
	DiskLimitBytes   *int64   `json:"diskLimitBytes,omitempty"`
	NetworkRxBytes   *int64   `json:"networkRxBytes,omitempty"`
	NetworkTxBytes   *int64   `json:"networkTxBytes,omitempty"`
}

// UsageReader is implemented by a provider that can say what a sandbox uses.
type UsageReader interface {
	// Usage reads what ref uses now. Errors: ErrNotFound when the provider holds nothing for ref,
	// ErrProviderUnavailable.
	Usage(ctx context.Context, ref Ref) (Usage, error)
}
