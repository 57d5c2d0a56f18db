package member

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ListeningPorts are the TCP ports process pid listens on, read from /proc: its sockets
// (/proc/<pid>/fd) matched by inode with the listening rows of its network namespace's
// /proc/<pid>/net/tcp and tcp6. A member's segment lists one of them as its te_endpoint (the
// transfer engine's handshake port), which tells its segments apart from another member's on the
// same IP.
func ListeningPorts(pid int) (map[int]bool, error) {
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	fds, err := os.ReadDir(filepath.Join(proc, "fd"))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(proc, "fd", fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		if err := listening(filepath.Join(proc, "net", table), inodes, ports); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	if len(ports) == 0 {
		return nil, fmt.Errorf("process %d listens on no TCP port", pid)
	}
	return ports, nil
}

// listening adds to ports the local port of every row of a /proc/net/tcp table in state LISTEN
// (0A) whose socket inode is in inodes.
func listening(table string, inodes map[string]bool, ports map[int]bool) error {
	f, err := os.Open(table)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
			continue
		}
		i := strings.LastIndexByte(fields[1], ':')
		if i < 0 {
			continue
		}
		if p, err := strconv.ParseUint(fields[1][i+1:], 16, 16); err == nil {
			ports[int(p)] = true
		}
	}
	return sc.Err()
}
