//go:build linux

package ha_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// storeClient is testdata/ha_client.py: one real MooncakeDistributedStore kept across
// failovers, as an engine keeps its own.
type storeClient struct {
	p       *proc
	stdin   io.WriteCloser
	answers chan clientAnswer
}

type clientAnswer struct {
	Op    string `json:"op"`
	Key   string `json:"key"`
	RC    int    `json:"rc"`
	Equal bool   `json:"equal"`
	Len   int    `json:"len"`
	Error string `json:"error"`
}

func startClient(t *testing.T, python, masterAddr, tenant string, localBuffer int) *storeClient {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "ha_client.py"))
	require.NoError(t, err)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &storeClient{stdin: inW, answers: make(chan clientAnswer, 16)}
	c.p = startProc(t, "ha_client.py", []string{
		"HA_MASTER=" + masterAddr, "HA_TENANT=" + tenant, "HA_LOCAL_BUFFER=" + strconv.Itoa(localBuffer),
		"PYTHONUNBUFFERED=1",
	}, inR, outW, python, script)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var a clientAnswer
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				a = clientAnswer{Op: "unparsable", Error: sc.Text()}
			}
			c.answers <- a
		}
		close(c.answers)
	}()
	go func() {
		<-c.p.Done()
		_ = outW.Close()
	}()
	t.Cleanup(func() { _ = inW.Close() })
	a, err := c.next(60 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "setup", a.Op, "the client's first answer")
	require.Equal(t, 0, a.RC, "MooncakeDistributedStore.setup")
	return c
}

// do sends one command line and waits up to d for its answer.
func (c *storeClient) do(line string, d time.Duration) (clientAnswer, error) {
	if _, err := fmt.Fprintln(c.stdin, line); err != nil {
		return clientAnswer{}, fmt.Errorf("writing to the client: %w", err)
	}
	return c.next(d)
}

func (c *storeClient) next(d time.Duration) (clientAnswer, error) {
	select {
	case a, ok := <-c.answers:
		if !ok {
			return clientAnswer{}, fmt.Errorf("the client exited:\n%s", c.p.Output())
		}
		return a, nil
	case <-time.After(d):
		return clientAnswer{}, fmt.Errorf("the client did not answer within %s:\n%s", d, c.p.Output())
	}
}

// put puts size bytes under key and reads them back: it succeeded when the put returned 0 and
// the same bytes came back.
func (c *storeClient) put(key string, size int) (rc int, ok bool, err error) {
	a, err := c.do(fmt.Sprintf("put %s %d", key, size), 60*time.Second)
	if err != nil {
		return 0, false, err
	}
	if a.Op != "put" {
		return 0, false, fmt.Errorf("answer to put: %+v", a)
	}
	return a.RC, a.RC == 0 && a.Equal, nil
}

// get is how many bytes a get of key returns (0: a miss).
func (c *storeClient) get(t *testing.T, key string) int {
	t.Helper()
	a, err := c.do("get "+key, 60*time.Second)
	require.NoError(t, err)
	require.Equal(t, "get", a.Op, "answer %+v", a)
	return a.Len
}
