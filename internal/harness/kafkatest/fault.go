package kafkatest

import (
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fake starts an in-process kfake cluster of one broker holding topics, each of partitions
// partitions, closed at t's cleanup (for unit tests and fault injection: InjectFault).
func Fake(t testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatalf("kafkatest: kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// FakeClient is a client of c, closed at t's cleanup.
func FakeClient(t testing.TB, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatalf("kafkatest: client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Fault makes a kfake cluster answer every Produce or OffsetCommit request with code on each
// partition while On is true — fault injection, what kfake is for. Failed counts the requests
// it answered.
type Fault struct {
	On     atomic.Bool
	Failed atomic.Int64
}

// InjectFault installs a Fault on c for request key (kmsg.Produce or kmsg.OffsetCommit), on.
func InjectFault(c *kfake.Cluster, key kmsg.Key, code int16) *Fault {
	f := &Fault{}
	f.On.Store(true)
	c.ControlKey(int16(key), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !f.On.Load() {
			return nil, nil, false
		}
		f.Failed.Add(1)
		switch req := r.(type) {
		case *kmsg.ProduceRequest:
			resp := req.ResponseKind().(*kmsg.ProduceResponse)
			for _, tp := range req.Topics {
				rt := kmsg.NewProduceResponseTopic()
				rt.Topic = tp.Topic
				for _, p := range tp.Partitions {
					rp := kmsg.NewProduceResponseTopicPartition()
					rp.Partition, rp.ErrorCode = p.Partition, code
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return resp, nil, true
		case *kmsg.OffsetCommitRequest:
			resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
			for _, tp := range req.Topics {
				rt := kmsg.NewOffsetCommitResponseTopic()
				rt.Topic = tp.Topic
				for _, p := range tp.Partitions {
					rp := kmsg.NewOffsetCommitResponseTopicPartition()
					rp.Partition, rp.ErrorCode = p.Partition, code
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return resp, nil, true
		}
		return nil, nil, false
	})
	return f
}
