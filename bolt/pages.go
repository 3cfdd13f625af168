package bolt

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// bbolt reads pages through unchecked pointers into its memory map: a truncated
// file or a damaged page id or element offset makes it read past the end of the
// file (SIGBUS) or of the map (SIGSEGV), which kills the process and cannot be
// recovered. checkPages walks the file's b-tree from bbolt's current meta page
// first, by its own reads, and refuses with ErrCorrupt every page id and offset
// that bbolt would follow outside the file, so that Open fails with an error and
// tx.Check meets only pages it can read. It checks bounds only; consistency is
// tx.Check's.
//
// The layout (bbolt's, in the host's byte order): a page is a header of id u64,
// flags u16, count u16, overflow u32, then count elements of 16 bytes: on a branch
// page pos u32, ksize u32, pgid u64; on a leaf page flags u32, pos u32, ksize u32,
// vsize u32, where pos is counted from the element itself. A leaf element with the
// bucket flag holds a bucket header (root pgid u64, sequence u64), followed by an
// inline leaf page when root is 0. A meta page holds magic u32, version u32, page
// size u32, flags u32, root bucket header, freelist pgid, pgid (the high-water
// mark), txid.
const (
	pageHeader     = 16
	pageElem       = 16
	pageBranch     = 0x01
	pageLeaf       = 0x02
	pageFreelist   = 0x10
	leafBucket     = 0x01
	bucketHeader   = 16
	metaOffRoot    = pageHeader + 16
	metaOffFree    = pageHeader + 32
	metaOffPgid    = pageHeader + 40
	metaOffTxid    = pageHeader + 48
	noFreelist     = ^uint64(0)
	maxBucketDepth = 64 // fence's buckets nest one deep; bounds the recursion
)

var ne = binary.NativeEndian

// pageWalk is one walk of a file's pages.
type pageWalk struct {
	f        io.ReaderAt
	pageSize int64
	hwm      uint64 // pages at or above it are not in use
	seen     map[uint64]bool
}

// checkPages checks the file at path, of which bbolt's read transaction sees
// txid, root page root, page size pageSize and size size (high-water mark times
// page size).
func checkPages(path string, pageSize int, txid uint64, root uint64, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("bolt: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("bolt: open %s: %w", path, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("bolt: open %s: %s: %w", path, fmt.Sprintf(format, args...), ErrCorrupt)
	}
	if fi.Size() < size {
		return bad("the file is %d bytes, its pages reach %d: truncated", fi.Size(), size)
	}
	w := &pageWalk{f: f, pageSize: int64(pageSize), hwm: uint64(size / int64(pageSize)), seen: map[uint64]bool{}}
	// The meta page of the transaction: the one of its txid and root.
	var meta []byte
	for id := int64(0); id < 2; id++ {
		m := make([]byte, pageHeader+64)
		if _, err := f.ReadAt(m, id*w.pageSize); err != nil {
			continue
		}
		if ne.Uint64(m[metaOffTxid:]) == txid && ne.Uint64(m[metaOffRoot:]) == root {
			meta = m
		}
	}
	if meta == nil {
		return bad("no meta page of transaction %d", txid)
	}
	if free := ne.Uint64(meta[metaOffFree:]); free != noFreelist {
		p, err := w.page(free)
		if err != nil {
			return bad("freelist: %v", err)
		}
		if err := checkFreelist(p, w.hwm); err != nil {
			return bad("freelist page %d: %v", free, err)
		}
	}
	if err := w.tree(root, 0); err != nil {
		return bad("%v", err)
	}
	return nil
}

// page reads page id with its overflow pages, refusing an id or an overflow that
// reaches the high-water mark.
func (w *pageWalk) page(id uint64) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("page id %d outside [2, %d)", id, w.hwm)
	}
	h := make([]byte, pageHeader)
	if _, err := w.f.ReadAt(h, int64(id)*w.pageSize); err != nil {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	over := uint64(ne.Uint32(h[12:]))
	if got := ne.Uint64(h); got != id {
		return nil, fmt.Errorf("page %d has the id %d", id, got)
	}
	if id+over >= w.hwm {
		return nil, fmt.Errorf("page %d: %d overflow pages pass the high-water mark %d", id, over, w.hwm)
	}
	p := make([]byte, int64(over+1)*w.pageSize)
	if _, err := w.f.ReadAt(p, int64(id)*w.pageSize); err != nil {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	return p, nil
}

// tree checks the b-tree of a bucket rooted at page id.
func (w *pageWalk) tree(id uint64, depth int) error {
	if w.seen[id] {
		return fmt.Errorf("page %d is referenced twice", id)
	}
	w.seen[id] = true
	p, err := w.page(id)
	if err != nil {
		return err
	}
	return w.node(p, fmt.Sprintf("page %d", id), depth)
}

// node checks the elements of page p (a page, or an inline bucket's page) and
// what they point to.
func (w *pageWalk) node(p []byte, where string, depth int) error {
	if len(p) < pageHeader {
		return fmt.Errorf("%s: %d bytes, shorter than a page header", where, len(p))
	}
	flags, count := ne.Uint16(p[8:]), int(ne.Uint16(p[10:]))
	if flags != pageBranch && flags != pageLeaf {
		return fmt.Errorf("%s: flags %#x, not a branch or leaf page", where, flags)
	}
	if pageHeader+count*pageElem > len(p) {
		return fmt.Errorf("%s: %d elements do not fit in %d bytes", where, count, len(p))
	}
	for i := range count {
		e := p[pageHeader+i*pageElem:]
		at := pageHeader + i*pageElem
		if flags == pageBranch {
			pos, ksize := int64(ne.Uint32(e[0:])), int64(ne.Uint32(e[4:]))
			if int64(at)+pos+ksize > int64(len(p)) {
				return fmt.Errorf("%s: key of element %d outside the page", where, i)
			}
			if err := w.tree(ne.Uint64(e[8:]), depth); err != nil {
				return err
			}
			continue
		}
		eflags, pos, ksize, vsize := ne.Uint32(e[0:]), int64(ne.Uint32(e[4:])), int64(ne.Uint32(e[8:])), int64(ne.Uint32(e[12:]))
		end := int64(at) + pos + ksize + vsize
		if end > int64(len(p)) {
			return fmt.Errorf("%s: key or value of element %d outside the page", where, i)
		}
		if eflags&leafBucket == 0 {
			continue
		}
		if depth >= maxBucketDepth {
			return fmt.Errorf("%s: buckets nested deeper than %d", where, maxBucketDepth)
		}
		v := p[end-vsize : end]
		if len(v) < bucketHeader {
			return fmt.Errorf("%s: bucket of element %d has a header of %d bytes", where, i, len(v))
		}
		if root := ne.Uint64(v); root != 0 {
			if err := w.tree(root, depth+1); err != nil {
				return err
			}
			continue
		}
		if err := w.node(v[bucketHeader:], where+fmt.Sprintf(" inline bucket %d", i), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// checkFreelist checks that a freelist page's ids lie within it and below the
// high-water mark hwm.
func checkFreelist(p []byte, hwm uint64) error {
	if ne.Uint16(p[8:])&pageFreelist == 0 {
		return fmt.Errorf("flags %#x, not a freelist page", ne.Uint16(p[8:]))
	}
	n, first := uint64(ne.Uint16(p[10:])), uint64(pageHeader)
	if n == 0xFFFF { // the count is the first id
		if len(p) < pageHeader+8 {
			return fmt.Errorf("count cut short")
		}
		n, first = ne.Uint64(p[pageHeader:]), pageHeader+8
	}
	if n > uint64(len(p)) || first+8*n > uint64(len(p)) {
		return fmt.Errorf("%d ids do not fit in %d bytes", n, len(p))
	}
	for i := range n {
		if id := ne.Uint64(p[first+8*i:]); id < 2 || id >= hwm {
			return fmt.Errorf("free page id %d outside [2, %d)", id, hwm)
		}
	}
	return nil
}
