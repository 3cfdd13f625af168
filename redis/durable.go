package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// masterForKeyer is implemented by *goredis.ClusterClient: WAIT has no key, so it
// must be sent to the node that owns the key's slot, on the script's connection.
type masterForKeyer interface {
	MasterForKey(ctx context.Context, key string) (*goredis.Client, error)
}

// stateReloader is implemented by *goredis.ClusterClient.
type stateReloader interface {
	masterForKeyer
	ReloadState(ctx context.Context)
}

// runWrite runs script on keys and args and returns its reply, or its error. If o
// asks for WAIT / WAITAOF, they follow the script in one pipeline, so that all use
// one connection (WAIT counts the writes of its own connection): on a Cluster the
// connection of keys[0]'s master. runWrite then also returns what of o they fell
// short of ("" if nothing). A server that lost its script cache gets the source.
// With followMoved, a slot that moved (MOVED: the pipeline bypassed the Cluster
// client's redirection) is tried once more at its new owner.
func runWrite(ctx context.Context, c Client, o *Options, script *goredis.Script, keys []string, args []any, followMoved bool) (any, string, error) {
	if o.WaitReplicas <= 0 && o.WaitAOFLocal <= 0 && o.WaitAOFReplicas <= 0 {
		res, err := script.Run(ctx, c, keys, args...).Result()
		return res, "", err
	}
	var p goredis.Pipeliner
	if mk, ok := c.(masterForKeyer); ok {
		m, err := mk.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, "", err
		}
		p = m.Pipeline()
	} else {
		p = c.Pipeline()
	}
	timeoutMS := o.WaitTimeout.Milliseconds()
	evalSha := true
	for {
		var cmd *goredis.Cmd
		if evalSha {
			cmd = script.EvalSha(ctx, p, keys, args...)
		} else {
			cmd = script.Eval(ctx, p, keys, args...)
		}
		// Pipeliner has no Wait method (it is not pipelined in Cmdable), so send the
		// commands by name; the pipeline's read deadline is the client's ReadTimeout.
		var wait, waitAOF *goredis.Cmd
		if o.WaitReplicas > 0 {
			wait = p.Do(ctx, "WAIT", o.WaitReplicas, timeoutMS)
		}
		if o.WaitAOFLocal > 0 || o.WaitAOFReplicas > 0 {
			waitAOF = p.Do(ctx, "WAITAOF", o.WaitAOFLocal, o.WaitAOFReplicas, timeoutMS)
		}
		_, _ = p.Exec(ctx) // errors are read per command below
		res, err := cmd.Result()
		if err != nil {
			if evalSha && isNoScript(err) {
				evalSha = false // the server lost its script cache (restart, failover): send the source
				continue
			}
			if addr, moved := goredis.IsMovedError(err); moved && followMoved {
				followMoved = false
				if np := pipelineAt(ctx, c, keys[0], addr); np != nil {
					p = np
					continue
				}
			}
			return nil, "", err
		}
		return res, o.shortfall(wait, waitAOF), nil
	}
}

// shortfall says how the replies of WAIT and WAITAOF (nil if not sent) fall short
// of o, or returns "" if they do not.
func (o *Options) shortfall(wait, waitAOF *goredis.Cmd) string {
	if wait != nil {
		if got, err := wait.Int64(); err != nil {
			return fmt.Sprintf("WAIT failed: %v", err)
		} else if got < int64(o.WaitReplicas) {
			return fmt.Sprintf("WAIT: %d of %d replicas acknowledged within %v", got, o.WaitReplicas, o.WaitTimeout)
		}
	}
	if waitAOF != nil {
		if got, err := waitAOF.Int64Slice(); err != nil {
			return fmt.Sprintf("WAITAOF failed (needs Redis 7.2+): %v", err)
		} else if len(got) != 2 || got[0] < int64(o.WaitAOFLocal) || got[1] < int64(o.WaitAOFReplicas) {
			return fmt.Sprintf("WAITAOF: acknowledged %v, wanted [%d %d] within %v", got, o.WaitAOFLocal, o.WaitAOFReplicas, o.WaitTimeout)
		}
	}
	return ""
}

// pipelineAt asks a Cluster client to reload its slot map (which it does in the
// background) and returns a pipeline on key's master once that is addr, or nil if
// the client is no Cluster client or the map did not catch up within about 500ms.
func pipelineAt(ctx context.Context, c Client, key, addr string) goredis.Pipeliner {
	if m := masterAfterReload(ctx, c, key, func(a string) bool { return a == addr }); m != nil {
		return m.Pipeline()
	}
	return nil
}

// masterAfterReload asks a Cluster client to reload its slot map (which it does in
// the background) and returns key's master once ok accepts its address, or nil if
// the client is no Cluster client or ok accepted none within about 500ms.
func masterAfterReload(ctx context.Context, c Client, key string, ok func(addr string) bool) *goredis.Client {
	r, isCluster := c.(stateReloader)
	if !isCluster {
		return nil
	}
	r.ReloadState(ctx)
	for i := 0; i < 50 && ctx.Err() == nil; i++ {
		if m, err := r.MasterForKey(ctx, key); err == nil && ok(m.Options().Addr) {
			return m
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || strings.HasPrefix(err.Error(), "NOSCRIPT"))
}
