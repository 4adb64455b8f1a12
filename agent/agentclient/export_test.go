package agentclient

import "time"

// SetWatchSilence sets how long a watch waits for a line of the agent's, for the test's length.
func SetWatchSilence(d time.Duration) (restore func()) {
	old := watchSilence
	watchSilence = d
	return func() { watchSilence = old }
}
