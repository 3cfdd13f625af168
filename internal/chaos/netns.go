package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The network layer of the partition nemesis: every host of a run (fence serve, each
// worker, each store server) in a network namespace of its own, with its own loopback
// and one veth to a bridge that lives in a namespace of its own too. The harness (this
// process) stays in the machine's namespace and reaches the hosts through one more
// veth to the bridge, the gateway, with the address .254 of the run's /24; it is the
// only thing the layer adds to the machine's namespace, and its subnet is one that no
// route or address of the machine overlaps.
//
// A partition is made with permanent neighbour entries: a host cut off from a peer
// resolves the peer's address to a MAC address that no host has, so its frames to
// the peer are flooded by the bridge and dropped by every host, silently (a connect
// times out; an open connection stalls), like a real partition. Healing deletes the
// entries, and the hosts resolve each other again. (iptables, nft and the tc actions
// are not available on this machine; ip route blackhole would fail connects at once
// instead of timing them out.)
//
// Every name the layer creates starts with netnsPrefix and carries the creating
// process's pid, so that a layer's start sweeps what a killed run left behind
// (namespaces and gateway links of pids that no longer run).

// netnsPrefix starts the name of every namespace and link the layer creates.
const netnsPrefix = "fencep"

// hostHarness names the harness, in the machine's own namespace, as a party of a
// partition: a host cut off from it resolves the gateway's address to nowhere.
const hostHarness = "harness"

// noMAC is the MAC address a partitioned peer resolves to: locally administered, and
// no host has it.
const noMAC = "02:00:00:fe:7c:00"

// netSeq numbers the layers of this process; netMu serialises their creation.
var (
	netMu  sync.Mutex
	netSeq int
)

// netLayer is one run's namespaces. Its methods are safe for concurrent use.
type netLayer struct {
	id     string       // "fencep-<pid36>-<seq36>": the prefix of its namespaces
	gwLink string       // the gateway's link in the machine's namespace
	subnet netip.Prefix // the hosts' /24

	mu    sync.Mutex
	hosts map[string]*netHost // by host name
	order []string            // host names in creation order
	cuts  [][2]string         // the neighbour entries a partition added: {host, peer}
	done  bool
}

// netHost is one host's namespace and address.
type netHost struct {
	ns string
	ip netip.Addr
}

// newNetLayer sweeps the namespaces and links that dead processes left behind, then
// creates the bridge, its namespace and the gateway of a new layer. It returns an
// error if ip (iproute2) is missing, the caller is not root, a namespace or link
// cannot be made or no free subnet is found; what it made is removed then.
func newNetLayer() (*netLayer, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("chaos: partition: %w (apt-get install iproute2)", err)
	}
	if uid := os.Geteuid(); uid != 0 {
		return nil, fmt.Errorf("chaos: partition: network namespaces need root; running as uid %d", uid)
	}
	netMu.Lock()
	defer netMu.Unlock()
	sweepNetns()
	netSeq++
	pid := strconv.FormatInt(int64(os.Getpid()), 36)
	seq := strconv.FormatInt(int64(netSeq%1296), 36)
	n := &netLayer{id: netnsPrefix + "-" + pid + "-" + seq, gwLink: netnsPrefix + pid + "-" + seq, hosts: map[string]*netHost{}}
	sub, err := freeSubnet(os.Getpid() + netSeq)
	if err != nil {
		return nil, err
	}
	n.subnet = sub
	gw := n.addr(254)
	br := n.id + "-br"
	steps := [][]string{
		{"netns", "add", br},
		{"-n", br, "link", "set", "lo", "up"},
		{"-n", br, "link", "add", "br0", "type", "bridge"},
		{"-n", br, "link", "set", "br0", "up"},
		{"-n", br, "link", "add", "gw", "type", "veth", "peer", "name", n.gwLink, "netns", strconv.Itoa(os.Getpid())},
		{"-n", br, "link", "set", "gw", "master", "br0", "up"},
		{"addr", "add", gw.String() + "/24", "dev", n.gwLink},
		{"link", "set", n.gwLink, "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			n.close()
			return nil, err
		}
	}
	return n, nil
}

// addr returns the address i of the layer's subnet.
func (n *netLayer) addr(i int) netip.Addr {
	b := n.subnet.Addr().As4()
	b[3] = byte(i)
	return netip.AddrFrom4(b)
}

// gateway returns the harness's address on the bridge.
func (n *netLayer) gateway() string { return n.addr(254).String() }

// host returns the address of the named host, creating its namespace and veth at
// the first call. It returns an error if they cannot be made or the subnet is full.
func (n *netLayer) host(name string) (string, error) {
	if name == hostHarness {
		return n.gateway(), nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if h, ok := n.hosts[name]; ok {
		return h.ip.String(), nil
	}
	if n.done {
		return "", errors.New("chaos: netns: layer closed")
	}
	i := len(n.order) + 1
	if i > 250 {
		return "", fmt.Errorf("chaos: netns: more than 250 hosts")
	}
	h := &netHost{ns: fmt.Sprintf("%s-%d", n.id, i), ip: n.addr(i)}
	br := n.id + "-br"
	port := fmt.Sprintf("h%d", i)
	n.hosts[name] = h // registered first, so close removes it even if a step fails
	n.order = append(n.order, name)
	steps := [][]string{
		{"netns", "add", h.ns},
		{"-n", h.ns, "link", "set", "lo", "up"},
		{"-n", br, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"-n", br, "link", "set", port, "master", "br0", "up"},
		{"-n", h.ns, "addr", "add", h.ip.String() + "/24", "dev", "eth0"},
		{"-n", h.ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return "", fmt.Errorf("chaos: netns: host %s: %w", name, err)
		}
	}
	return h.ip.String(), nil
}

// command returns the command that runs bin with args in the named host's namespace
// (`ip netns exec`, which execs bin in place, so the process's pid is bin's). A host
// whose namespace cannot be made gets a command that fails to start with that error.
func (n *netLayer) command(host, bin string, args ...string) *exec.Cmd {
	if _, err := n.host(host); err != nil {
		cmd := exec.Command(bin, args...)
		cmd.Err = err
		return cmd
	}
	n.mu.Lock()
	ns := n.hosts[host].ns
	n.mu.Unlock()
	ip, err := exec.LookPath("ip")
	if err != nil {
		cmd := exec.Command(bin, args...)
		cmd.Err = fmt.Errorf("chaos: netns: %w (apt-get install iproute2)", err)
		return cmd
	}
	return exec.Command(ip, append([]string{"netns", "exec", ns, bin}, args...)...)
}

// hostOf returns the name of the host with the given address, "" if none has it.
func (n *netLayer) hostOf(addr string) string {
	if addr == n.gateway() {
		return hostHarness
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, h := range n.hosts {
		if h.ip.String() == addr {
			return name
		}
	}
	return ""
}

// cut partitions every host of a from every host of b: each resolves the others'
// addresses to noMAC. The harness's side is never changed (its namespace is the
// machine's), so a cut from the harness is the other host's half alone, which is
// enough: the host's frames to the harness are dropped, replies and all. It returns
// an error if an entry cannot be set; the entries set so far stay for heal.
func (n *netLayer) cut(a, b []string) error {
	var pairs [][2]string
	for _, x := range a {
		for _, y := range b {
			if x != y {
				pairs = append(pairs, [2]string{x, y}, [2]string{y, x})
			}
		}
	}
	return n.neigh(pairs, "replace")
}

// heal removes every entry the cuts since the last heal added, so the hosts reach
// each other again. It returns an error if one cannot be removed.
func (n *netLayer) heal() error {
	n.mu.Lock()
	pairs := n.cuts
	n.cuts = nil
	n.mu.Unlock()
	return n.neigh(pairs, "del")
}

// neigh replaces ("replace") or deletes ("del") the neighbour entry of each pair's
// peer in the pair's host, one ip batch per host.
func (n *netLayer) neigh(pairs [][2]string, op string) error {
	batches := map[string]*bytes.Buffer{}
	var order []string
	for _, p := range pairs {
		if p[0] == hostHarness {
			continue
		}
		if _, err := n.host(p[0]); err != nil {
			return err
		}
		peer, err := n.host(p[1])
		if err != nil {
			return err
		}
		n.mu.Lock()
		ns := n.hosts[p[0]].ns
		if op == "replace" {
			n.cuts = append(n.cuts, p)
		}
		n.mu.Unlock()
		if batches[ns] == nil {
			batches[ns] = &bytes.Buffer{}
			order = append(order, ns)
		}
		if op == "replace" {
			fmt.Fprintf(batches[ns], "neigh replace %s lladdr %s dev eth0 nud permanent\n", peer, noMAC)
		} else {
			fmt.Fprintf(batches[ns], "neigh del %s dev eth0\n", peer)
		}
	}
	for _, ns := range order {
		// -force: a del of an entry already gone (a pair given twice) is no failure
		// of the others.
		cmd := exec.Command("ip", "-force", "-n", ns, "-batch", "-")
		cmd.Stdin = batches[ns]
		if out, err := cmd.CombinedOutput(); err != nil && op == "replace" {
			return fmt.Errorf("chaos: netns: ip neigh %s in %s: %w: %s", op, ns, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// names returns the namespaces of the layer, hosts and bridge.
func (n *netLayer) names() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := []string{n.id + "-br"}
	for _, name := range n.order {
		out = append(out, n.hosts[name].ns)
	}
	return out
}

// close deletes the layer's namespaces (their veths and the bridge go with them) and
// the gateway link. The processes in them must have exited. It is idempotent.
func (n *netLayer) close() {
	names := n.names()
	n.mu.Lock()
	n.done = true
	n.mu.Unlock()
	for _, ns := range names {
		_ = ipCmd("netns", "del", ns)
	}
	removeLink(n.gwLink)
}

// removeLink deletes the link of the machine's namespace if it is there and waits
// (at most 5 s) until it is gone: a veth goes when its peer's namespace is destroyed,
// which the kernel does a moment after the namespace's last process exits.
func removeLink(name string) {
	for i := 0; i < 50 && linkExists(name); i++ {
		_ = ipCmd("link", "del", name)
		time.Sleep(100 * time.Millisecond)
	}
}

func linkExists(name string) bool {
	return exec.Command("ip", "link", "show", "dev", name).Run() == nil
}

// ipCmd runs ip with args and returns an error with its output if it fails.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: netns: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// sweepNetns deletes the namespaces and gateway links of netnsPrefix whose creating
// process no longer runs.
func sweepNetns() {
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || !strings.HasPrefix(f[0], netnsPrefix+"-") {
				continue
			}
			parts := strings.SplitN(strings.TrimPrefix(f[0], netnsPrefix+"-"), "-", 2)
			if stalePid(parts[0]) {
				_ = ipCmd("netns", "del", f[0])
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if !strings.HasPrefix(name, netnsPrefix) || strings.HasPrefix(name, netnsPrefix+"-") {
				continue
			}
			pid, _, _ := strings.Cut(strings.TrimPrefix(name, netnsPrefix), "-")
			if stalePid(pid) {
				_ = ipCmd("link", "del", name)
			}
		}
	}
}

// stalePid reports whether pid36, a pid in base 36, is no running process.
func stalePid(pid36 string) bool {
	pid, err := strconv.ParseInt(pid36, 36, 32)
	if err != nil || pid <= 0 {
		return false // not a name of ours after all
	}
	if int(pid) == os.Getpid() {
		return false
	}
	err = syscall.Kill(int(pid), 0)
	return errors.Is(err, syscall.ESRCH)
}

// freeSubnet returns a /24 of 10.0.0.0/8 that no route or address of the machine's
// namespace overlaps, starting the search at one that seed picks. It returns an error
// if ip cannot list them or none of 256 candidates is free.
func freeSubnet(seed int) (netip.Prefix, error) {
	var used []netip.Prefix
	for _, args := range [][]string{{"-4", "route", "show", "table", "all"}, {"-4", "-o", "addr", "show"}} {
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("chaos: netns: ip %s: %w", strings.Join(args, " "), err)
		}
		for _, w := range strings.Fields(string(out)) {
			if w == "default" {
				continue // it overlaps everything, and routes nothing our subnet's own route does not
			}
			if p, err := netip.ParsePrefix(w); err == nil {
				used = append(used, p)
			} else if a, err := netip.ParseAddr(w); err == nil && a.Is4() {
				used = append(used, netip.PrefixFrom(a, 32))
			}
		}
	}
	for i := 0; i < 256; i++ {
		k := (seed + i*97) % (150 * 256)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + k/256), byte(k % 256), 0}), 24)
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("chaos: netns: no free /24 in 10.100.0.0-10.249.255.0")
}
