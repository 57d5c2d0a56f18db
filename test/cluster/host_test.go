package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// hostPicture is what hack/cluster.sh up may change outside its state directory, as
// `hack/cluster.sh footprint` names it (the sysctls it touches, the host paths it may create, the
// nodes' cgroups and bridges), plus the iptables chains and nft tables the cluster's programs
// write: taken before the suite's first up, compared after a failed up and after the last down.
type hostPicture struct {
	state   string
	sysctls map[string]string // only those readable before
	paths   map[string]bool   // exists
	cgroups []string
	bridges []string
	chains  []string // KUBE-*/CNI-* chains, per table and family
	nft     []string // nft tables
}

func takeHostPicture() (hostPicture, error) {
	out, err := script("hack/cluster.sh", "footprint")
	if err != nil {
		return hostPicture{}, fmt.Errorf("hack/cluster.sh footprint: %w\n%s", err, out)
	}
	p := hostPicture{sysctls: map[string]string{}, paths: map[string]bool{}}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		kind, value, _ := strings.Cut(line, " ")
		switch kind {
		case "sysctl":
			if v, err := os.ReadFile(sysctlPath(value)); err == nil {
				p.sysctls[value] = strings.TrimSpace(string(v))
			}
		case "path":
			p.paths[value] = exists(value)
		case "cgroup":
			p.cgroups = append(p.cgroups, value)
		case "bridge":
			p.bridges = append(p.bridges, value)
		case "state":
			p.state = value
		default:
			return hostPicture{}, fmt.Errorf("hack/cluster.sh footprint: unknown line %q", line)
		}
	}
	if p.state == "" || len(p.bridges) == 0 || len(p.cgroups) == 0 {
		return hostPicture{}, fmt.Errorf("hack/cluster.sh footprint names no state directory, bridge or cgroup:\n%s", out)
	}
	p.chains = clusterChains()
	p.nft = nftTables()
	return p, nil
}

// changes compares the host now with the picture and says what the cluster left: a sysctl not
// back to its value, a host path created (or removed), a node cgroup or bridge still there, a
// KUBE-/CNI- chain or nft table that was not there, a mount under the state directory or a host
// path, and any process whose arguments name the state directory (every process up starts has
// one: a config file, a data directory, a socket) or that still runs in a node's cgroup.
func (p hostPicture) changes() []string {
	var left []string
	for k, was := range p.sysctls {
		if v, err := os.ReadFile(sysctlPath(k)); err == nil && strings.TrimSpace(string(v)) != was {
			left = append(left, fmt.Sprintf("sysctl %s is %q, was %q", k, strings.TrimSpace(string(v)), was))
		}
	}
	for path, was := range p.paths {
		if now := exists(path); now != was {
			left = append(left, fmt.Sprintf("%s exists: %v, was %v", path, now, was))
		}
	}
	for _, c := range p.cgroups {
		if exists(c) {
			procs, _ := exec.Command("find", c, "-name", "cgroup.procs", "-exec", "cat", "{}", "+").Output()
			left = append(left, fmt.Sprintf("cgroup %s (processes: %s)", c, strings.Join(strings.Fields(string(procs)), " ")))
		}
	}
	for _, b := range p.bridges {
		if exists(filepath.Join("/sys/class/net", b)) {
			left = append(left, "bridge "+b)
		}
	}
	for _, c := range clusterChains() {
		if !slices.Contains(p.chains, c) {
			left = append(left, "iptables chain "+c)
		}
	}
	for _, t := range nftTables() {
		if !slices.Contains(p.nft, t) {
			left = append(left, "nft "+t)
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mounts), "\n") {
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			if strings.HasPrefix(f[4], p.state+"/") {
				left = append(left, "mount "+f[4])
			}
			for path, was := range p.paths {
				if !was && strings.HasPrefix(f[4], path+"/") {
					left = append(left, "mount "+f[4])
				}
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(raw, []byte{0}) {
			if bytes.Contains(arg, []byte(p.state+"/")) {
				left = append(left, fmt.Sprintf("process %s: %s", filepath.Base(filepath.Dir(f)), bytes.ReplaceAll(bytes.TrimRight(raw, "\x00"), []byte{0}, []byte{' '})))
				break
			}
		}
	}
	slices.Sort(left)
	return left
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// clusterChains lists the KUBE-*/CNI-* chains as "family table chain".
func clusterChains() []string {
	var out []string
	for family, save := range map[string]string{"ipv4": "iptables-save", "ipv6": "ip6tables-save"} {
		dump, err := exec.Command(save).Output()
		if err != nil {
			continue
		}
		table := ""
		for _, line := range strings.Split(string(dump), "\n") {
			if t, ok := strings.CutPrefix(line, "*"); ok {
				table = t
			}
			if c, ok := strings.CutPrefix(line, ":"); ok && (strings.HasPrefix(c, "KUBE-") || strings.HasPrefix(c, "CNI-")) {
				out = append(out, family+" "+table+" "+strings.Fields(c)[0])
			}
		}
	}
	slices.Sort(out)
	return out
}

func nftTables() []string {
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil
	}
	var tables []string
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			tables = append(tables, line)
		}
	}
	return tables
}
