package service

import (
	"context"
	"errors"

	"github.com/fencelock/fence"
)

// KVSupport returns nil if the store can do the KV operation op (get, put,
// delete, fence or purge), else the error of ErrNotImplemented that says why.
// Each KV method checks it first; an adapter may call it before it reads the
// rest of a request, to answer that first.
func (s *Service) KVSupport(op string) error {
	if s.cfg.KV == nil {
		return Because(ErrNotImplemented, "not supported by this server (it has no KV store)")
	}
	switch op {
	case "fence":
		if _, ok := s.cfg.KV.(fence.Guard); !ok {
			return Because(ErrNotImplemented, "not supported by this server's store (it cannot fence without writing)")
		}
	case "purge":
		if _, ok := s.cfg.KV.(fence.Purger); !ok {
			return Because(ErrNotImplemented, "not supported by this server's store (it cannot purge a key)")
		}
	}
	return nil
}

// KVGet returns key's item. A key with a fence but no value (fenced only, or
// deleted) is fence.ErrNotFound, returned with the item, whose fence is the one
// a writer must pass. Errors: ErrNotImplemented without a KV, fence.ErrNotFound,
// and the store's.
func (s *Service) KVGet(ctx context.Context, key string) (fence.Item, error) {
	if err := s.KVSupport("get"); err != nil {
		return fence.Item{}, err
	}
	item, err := s.cfg.KV.Get(ctx, key)
	if err != nil {
		return item, err
	}
	if item.Value == nil {
		return item, Because(fence.ErrNotFound, "no value (the key is fenced by lock %q at token %d)", item.Fence.Name, item.Fence.Token)
	}
	return item, nil
}

// KVPut writes value to key under fence f (P1, P9): ctx may name the write's
// attempt (fence.WithWriteAttempt). Errors: ErrTooLarge over MaxValueBytes,
// ErrNotImplemented without a KV, the store's refusals (fence.ErrStaleToken,
// fence.ErrUnissuedToken, fence.ErrLeaseRequired, fence.ErrNamespace) and its
// other errors.
func (s *Service) KVPut(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if err := s.KVSupport("put"); err != nil {
		return err
	}
	if int64(len(value)) > s.cfg.MaxValueBytes {
		return Because(ErrTooLarge, "value over the limit of %d bytes", s.cfg.MaxValueBytes)
	}
	if err := s.cfg.KV.Put(ctx, key, value, f); err != nil {
		s.countRefusal(err, key, f)
		return err
	}
	s.m.kvWrites.Inc()
	return nil
}

// KVDelete removes key's value under fence f, keeping its fence; errors as
// KVPut's.
func (s *Service) KVDelete(ctx context.Context, key string, f fence.Fence) error {
	if err := s.KVSupport("delete"); err != nil {
		return err
	}
	if err := s.cfg.KV.Delete(ctx, key, f); err != nil {
		s.countRefusal(err, key, f)
		return err
	}
	s.m.kvWrites.Inc()
	return nil
}

// Fence advances key's fence to f without writing (fence.Guard); errors as
// KVPut's, and ErrNotImplemented when the store cannot fence without writing.
func (s *Service) Fence(ctx context.Context, key string, f fence.Fence) error {
	if err := s.KVSupport("fence"); err != nil {
		return err
	}
	if err := s.cfg.KV.(fence.Guard).Fence(ctx, key, f); err != nil {
		s.countRefusal(err, key, f)
		return err
	}
	return nil
}

// Purge removes key's value and fence (fence.Purger): the one way a key's fence
// goes back, an admin's. Errors: ErrNotImplemented when the store cannot purge,
// and the store's.
func (s *Service) Purge(ctx context.Context, key string) error {
	if err := s.KVSupport("purge"); err != nil {
		return err
	}
	if err := s.cfg.KV.(fence.Purger).Purge(ctx, key); err != nil {
		return err
	}
	s.log.Info("key purged", "key", key)
	return nil
}

// countRefusal counts and logs a fenced write the store refused.
func (s *Service) countRefusal(err error, key string, f fence.Fence) {
	switch {
	case errors.Is(err, fence.ErrUnissuedToken):
		s.m.unissued.Inc()
		s.log.Info("fenced write refused", "key", key, "fence", f.String(), "err", err)
	case errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrNamespace):
		s.m.stale.Inc()
		s.log.Info("fenced write refused", "key", key, "fence", f.String(), "err", err)
	case errors.Is(err, fence.ErrLeaseRequired):
		s.log.Info("fenced write refused", "key", key, "fence", f.String(), "err", err)
	}
}
