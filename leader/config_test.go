package leader

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateTiming(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name                          string
		duration, deadline, retry, gr time.Duration
		want                          []string // substrings of the error; none: valid
	}{
		{name: "the defaults are valid", duration: DefaultLeaseDuration, deadline: DefaultRenewDeadline, retry: DefaultRetryPeriod, gr: DefaultStopGrace},
		{name: "client-go's own defaults are valid", duration: 15 * s, deadline: 10 * s, retry: 2 * s, gr: 0},
		{name: "a lease duration equal to the renew deadline is refused", duration: 7 * s, deadline: 7 * s, retry: s,
			want: []string{"lease duration 7s must be greater than renew deadline 7s"}},
		{name: "a renew deadline at 1.2 retry periods is refused", duration: 10 * s, deadline: 1200 * time.Millisecond, retry: s,
			want: []string{"renew deadline 1.2s must be greater than 1.2 x retry period 1s"}},
		{name: "a fractional lease duration is refused, since the Lease stores whole seconds", duration: 1500 * time.Millisecond, deadline: 1200 * time.Millisecond, retry: 500 * time.Millisecond,
			want: []string{"lease duration 1.5s: must be a whole number of seconds, at least 1s"}},
		{name: "a lease duration under a second is refused", duration: 0, deadline: 0, retry: 0,
			want: []string{"lease duration 0s: must be a whole number", "renew deadline 0s: must be positive", "retry period 0s: must be positive"}},
		{name: "a negative stop grace is refused", duration: 10 * s, deadline: 7 * s, retry: s, gr: -s,
			want: []string{"stop grace -1s: must not be negative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateTiming(tc.duration, tc.deadline, tc.retry, tc.gr)
			if len(tc.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestConfigValidateNamesWhatIsMissing(t *testing.T) {
	err := Config{PodName: "p", LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod}.validate()
	require.Error(t, err)
	assert.Equal(t, "no API client\nthe Lease needs a namespace and a name\nempty identity\na Pod name without a namespace\nno master command", err.Error())
}
