package kafkatest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ClusterBrokers are the brokers of the three-node cluster of `scripts/stack.sh cluster`; node
// N (1-3) listens on the Nth.
var ClusterBrokers = []string{"127.0.0.1:29092", "127.0.0.1:29093", "127.0.0.1:29094"}

// ClusterReplicationFactor is the cluster's replication factor (min.insync.replicas is 2).
const ClusterReplicationFactor = 3

// Cluster is the three-node KRaft cluster (combined broker+controller nodes, what production
// runs) of `scripts/stack.sh cluster`, for fault tests: it tells which node leads a partition
// and which is the active controller, kills a node with SIGKILL and starts it again.
type Cluster struct {
	t      testing.TB
	script string
	adm    *kadm.Client
	cl     *kgo.Client
}

// StartCluster starts the cluster (`scripts/stack.sh cluster up`: idempotent, jars from
// STACK_KAFKA_LIBS or resolved with mvn), waits until its three brokers are registered and
// stops it at cleanup when it was not running before. Call it before anything whose cleanup
// needs the cluster (topic deletion), so that cleanup runs first.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	SkipShort(t)
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	c := &Cluster{t: t, script: filepath.Join(root, "scripts", "stack.sh")}
	status := c.run("status")
	wasUp := strings.Count(status, ": running") == 3
	c.run("up")
	if !wasUp {
		t.Cleanup(func() { c.run("down") })
	}
	c.cl, err = kgo.NewClient(kgo.SeedBrokers(ClusterBrokers...))
	if err != nil {
		t.Fatalf("kafkatest: cluster client: %v", err)
	}
	t.Cleanup(c.cl.Close)
	c.adm = kadm.NewClient(c.cl)
	c.WaitFor("three brokers registered", 2*time.Minute, func(ctx context.Context) (bool, error) {
		m, err := c.adm.BrokerMetadata(ctx)
		return err == nil && len(m.Brokers) == 3, err
	})
	return c
}

func (c *Cluster) run(args ...string) string {
	c.t.Helper()
	cmd := exec.Command(c.script, append([]string{"cluster"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("kafkatest: scripts/stack.sh cluster %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Admin returns an admin client on the cluster's three brokers.
func (c *Cluster) Admin() *kadm.Client { return c.adm }

// Kill sends SIGKILL to node (1-3), as a machine that dies, and returns when it is gone.
func (c *Cluster) Kill(node int32) {
	c.t.Helper()
	c.t.Logf("kafkatest: %s", strings.TrimSpace(c.run("kill", fmt.Sprint(node))))
}

// Start starts node (1-3) again on its data and returns once it listens.
func (c *Cluster) Start(node int32) {
	c.t.Helper()
	c.t.Logf("kafkatest: %s", strings.TrimSpace(c.run("start", fmt.Sprint(node))))
}

// Leaders returns the leader of each partition of topic as the cluster's metadata has it (-1:
// none); a dead node stays leader until the controller has fenced it.
func (c *Cluster) Leaders(ctx context.Context, topic string) (map[int32]int32, error) {
	m, err := c.adm.Metadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	td, ok := m.Topics[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("kafkatest: metadata of %s: %w", topic, cmp.Or(td.Err, error(kerr.UnknownTopicOrPartition)))
	}
	out := map[int32]int32{}
	for p, pd := range td.Partitions {
		out[p] = pd.Leader
		if pd.Err != nil {
			out[p] = -1
		}
	}
	return out, nil
}

// FullISR reports whether every partition of topics has all three replicas in sync.
func (c *Cluster) FullISR(ctx context.Context, topics ...string) (bool, error) {
	m, err := c.adm.Metadata(ctx, topics...)
	if err != nil {
		return false, err
	}
	for _, t := range topics {
		td, ok := m.Topics[t]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			return false, nil
		}
		for _, pd := range td.Partitions {
			if pd.Err != nil || len(pd.ISR) != ClusterReplicationFactor {
				return false, nil
			}
		}
	}
	return true, nil
}

// ActiveController returns the node that leads the KRaft metadata quorum (the active
// controller), from DescribeQuorum: in KRaft the metadata response's controller id is any
// broker, not the controller.
func (c *Cluster) ActiveController(ctx context.Context) (int32, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rp := kmsg.NewDescribeQuorumRequestTopicPartition()
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return -1, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return -1, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return -1, errors.New("kafkatest: DescribeQuorum: no __cluster_metadata partition in the response")
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return -1, err
	}
	return p.LeaderID, nil
}

// WaitFor polls cond every 100ms (each call bounded by 5s) until it returns true, or fails the
// test after timeout with the last error; it returns how long it took.
func (c *Cluster) WaitFor(what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) time.Duration {
	c.t.Helper()
	start := time.Now()
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := cond(ctx)
		cancel()
		if ok {
			return time.Since(start)
		}
		if err != nil {
			last = err
		}
		if time.Since(start) > timeout {
			c.t.Fatalf("kafkatest: timed out after %s waiting for %s (last error: %v)", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// repoRoot is the directory of go.mod above the working directory (a test runs in its
// package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
