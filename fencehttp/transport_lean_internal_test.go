package fencehttp

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseHead: whatever head parseHead reads itself, net/http's ReadResponse
// reads the same way (status, Content-Length, the Fence headers, keep-alive,
// where the body starts), and a head it waits on is one ReadResponse cannot
// finish either. What it leaves to ReadResponse needs no check: ReadResponse
// then reads the answer from its first byte.
func FuzzParseHead(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Wed, 02 Dec 2026 00:00:00 GMT\r\nContent-Length: 14\r\n\r\n{\"name\":\"a\"}\r\n",
		"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\nFence-Index: 7\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nFence-Token: 12\r\nFence-Lock: a%2Fb\r\ncontent-length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
		"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Le",
		"HTTP/1.1 200 OK\r\n X: folded\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, n, st := parseHead(data)
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), nil)
		switch st {
		case headOther:
			return
		case headMore:
			if err == nil {
				t.Fatalf("parseHead waits for more of %q, which ReadResponse read: %d", data, resp.StatusCode)
			}
			return
		}
		if err != nil {
			t.Fatalf("parseHead read %q (status %d), ReadResponse refused it: %v", data, h.status, err)
		}
		if resp.StatusCode != h.status || resp.ContentLength != int64(h.length) || resp.Close || len(resp.TransferEncoding) != 0 {
			t.Fatalf("%q: parseHead read status %d length %d; ReadResponse status %d length %d close %v TE %v",
				data, h.status, h.length, resp.StatusCode, resp.ContentLength, resp.Close, resp.TransferEncoding)
		}
		for key, got := range map[string][]byte{HeaderIndex: h.index, HeaderToken: h.token, HeaderLock: h.lock} {
			want, ok := resp.Header[key]
			if ok != (got != nil) || ok && (len(want) != 1 || want[0] != string(got)) {
				t.Fatalf("%q: %s: parseHead read %q (present %v), ReadResponse %q", data, key, got, got != nil, want)
			}
		}
		body, berr := io.ReadAll(resp.Body)
		if rest := data[n:]; len(rest) >= h.length {
			if berr != nil || !bytes.Equal(body, rest[:h.length]) {
				t.Fatalf("%q: the body after parseHead's %d bytes is %q, ReadResponse read %q (%v)", data, n, rest[:h.length], body, berr)
			}
		} else if berr == nil {
			t.Fatalf("%q: body of %d bytes cut to %d: ReadResponse read it without an error", data, h.length, len(rest))
		}
	})
}

// The lean path's requests are the ones net/http's Request.Write sends: same
// method, target, host, headers, length and body, as a server reads them.
func TestLeanHead_RequestAsNetHTTPWritesIt(t *testing.T) {
	for _, tc := range []struct {
		base, auth, method, path string
		header                   http.Header
		body                     []byte
	}{
		{"http://127.0.0.1:7420", "", http.MethodPost, "/v1/locks/" + EscapeName("job.1") + "/acquire", jsonHeader(), []byte(`{"ttl_ms":1000,"wait_ms":0}`)},
		{"http://127.0.0.1:7420/", "s3cret", http.MethodPost, "/v1/locks/" + EscapeName("a/b c") + "/release", jsonHeader(), []byte(`{"lease":"x"}`)},
		{"http://localhost/fence/", "t", http.MethodGet, "/v1/locks?prefix=a%2Fb&limit=3", nil, nil},
		{"http://[::1]:8080", "", http.MethodPost, "/v1/fences/k", http.Header{HeaderToken: {"3"}, HeaderLock: {"a%2Fb"}}, nil},
		{"http://example.com:80/p%20q", "t", http.MethodPut, "/v1/kv/" + EscapeName("k"), http.Header{"Content-Type": {"application/octet-stream"}}, []byte{}},
	} {
		u, err := url.Parse(tc.base)
		if err != nil {
			t.Fatal(err)
		}
		lh := newLeanHead(u, tc.auth)
		if lh == nil {
			t.Fatalf("%s: no lean head", tc.base)
		}
		lean := lh.append(nil, &leanRequest{method: tc.method, path: tc.path, header: tc.header, body: tc.body})

		var rd io.Reader
		if tc.body != nil {
			rd = bytes.NewReader(tc.body)
		}
		req, err := http.NewRequest(tc.method, strings.TrimSuffix(u.String(), "/")+tc.path, rd)
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range tc.header {
			req.Header[k] = vs
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", "Bearer "+tc.auth)
		}
		var std bytes.Buffer
		if err := req.Write(&std); err != nil {
			t.Fatal(err)
		}
		got, want := readRequest(t, lean), readRequest(t, std.Bytes())
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s %s%s:\nlean    %+v\nnet/http %+v", tc.method, tc.base, tc.path, got, want)
		}
	}
}

// sentRequest is what a server reads of a request.
type sentRequest struct {
	Method, RequestURI, Host string
	Header                   http.Header
	ContentLength            int64
	Body                     string
}

func readRequest(t *testing.T, wire []byte) sentRequest {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(wire))
	r, err := http.ReadRequest(br)
	if err != nil {
		t.Fatalf("reading %q: %v", wire, err)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if br.Buffered() != 0 {
		t.Fatalf("%q: %d bytes after the request", wire, br.Buffered())
	}
	return sentRequest{r.Method, r.RequestURI, r.Host, r.Header, r.ContentLength, string(body)}
}

// A base URL or auth token the lean path would not write as net/http does
// leaves the Client on net/http's path.
func TestNewLeanHead_RefusesWhatNetHTTPWouldClean(t *testing.T) {
	for _, tc := range []struct{ base, auth string }{
		{"https://127.0.0.1:7420", ""},
		{"http://[fe80::1%25eth0]:7420", ""},
		{"http://127.0.0.1:7420", "a\r\nX-Injected: 1"},
		{"http://127.0.0.1:7420", "tok\u00e9n"},
	} {
		u, err := url.Parse(tc.base)
		if err != nil {
			t.Fatal(err)
		}
		if lh := newLeanHead(u, tc.auth); lh != nil {
			t.Errorf("base %q auth %q: want no lean head, got %q", tc.base, tc.auth, lh.lines)
		}
	}
}
