//go:build !linux

package fencehttp

// peerWatch notices that the client of a parked connection went away.
type peerWatch struct{ reader peerReader }

// watchPeer starts watching p's client: cancels p.ctx if it goes away.
func watchPeer(p *parkedConn) { p.peer.reader.read(p) }

// stop ends the watch and reports whether the client is still there.
func (w *peerWatch) stop(p *parkedConn) bool { return w.reader.stop(p) }
