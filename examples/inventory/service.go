package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/postgres"
)

// snapshotDDL is the seed's inventory_snapshot table: one row per snapshot id, the
// whole inventory as JSON. It has no fence column: its writes are fenced by the
// guard's fences table (fence_resources), in the same transaction.
const snapshotDDL = `CREATE TABLE IF NOT EXISTS inventory_snapshot (
    id         text  PRIMARY KEY,
    data       jsonb NOT NULL,
    lock_name  text  NOT NULL,
    token      bigint NOT NULL
)`

// maxSnapshotBytes bounds a PUT's body.
const maxSnapshotBytes = 1 << 20

// snapshot is the JSON of GET /inventory/{id} and of a PUT's answer.
type snapshot struct {
	ID    string           `json:"id"`
	Data  map[string]int64 `json:"data,omitempty"`
	Lock  string           `json:"lock"`
	Token fence.Token      `json:"token"`
}

// service is the inventory snapshot store: PUT /inventory/{id} replaces the
// snapshot, fenced; GET /inventory/{id} reads it.
type service struct {
	db    postgres.DB
	guard *postgres.Guard
}

// newService returns the service on db, creating its tables if needed.
func newService(ctx context.Context, db postgres.DB) (*service, error) {
	g := postgres.NewGuard(db, nil)
	if err := g.CreateSchema(ctx); err != nil {
		return nil, err
	}
	if _, err := db.Exec(ctx, snapshotDDL); err != nil {
		return nil, fmt.Errorf("create inventory_snapshot: %w", err)
	}
	return &service{db: db, guard: g}, nil
}

// handler routes the service. The PUT is the one line that makes the table a
// fenced resource: FencedTx admits the request's Fence-Token and Fence-Lock in the
// transaction that writes the row, and answers 409 with the highest token when a
// newer holder already wrote.
func (s *service) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("PUT /inventory/{id}", fencehttp.FencedTx(s.guard.Do, s.put, &fencehttp.ResourceOptions{
		Resource: func(r *http.Request) string { return "inventory_snapshot/" + r.PathValue("id") },
	}))
	mux.HandleFunc("GET /inventory/{id}", s.get)
	return mux
}

// put stores the body, a JSON object of SKU to quantity, as the snapshot, in tx.
func (s *service) put(w http.ResponseWriter, r *http.Request, tx pgx.Tx) error {
	f, _ := fencehttp.FenceFromContext(r.Context())
	var data map[string]int64
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSnapshotBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&data); err != nil || data == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{
			"error": "the body must be a JSON object of SKU to quantity, e.g. {\"apples\": 3}", "code": "invalid", "field": "body"})
		return errors.New("bad snapshot body") // roll back: the fence does not advance
	}
	id := r.PathValue("id")
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(r.Context(), `INSERT INTO inventory_snapshot (id, data, lock_name, token) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET data = excluded.data, lock_name = excluded.lock_name, token = excluded.token`,
		id, raw, f.Name, int64(f.Token)); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, snapshot{ID: id, Data: data, Lock: f.Name, Token: f.Token})
	return nil
}

// get answers the snapshot id, or 404.
func (s *service) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var (
		raw  []byte
		snap = snapshot{ID: id}
		tok  int64
	)
	err := s.db.QueryRow(r.Context(), `SELECT data, lock_name, token FROM inventory_snapshot WHERE id = $1`, id).Scan(&raw, &snap.Lock, &tok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("get %q: not found", id), "code": "not_found"})
		return
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": fmt.Sprintf("get %q: database unavailable", id), "code": "unavailable"})
		return
	}
	snap.Token = fence.Token(tok)
	if err := json.Unmarshal(raw, &snap.Data); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error", "code": "internal"})
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
