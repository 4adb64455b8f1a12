package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// Streamed files (docs/files.md): raw bytes in and out with ranges, resumable uploads and SHA-256
// digests (RFC 9530's Repr-Digest), directories as tar streams, and a watch of a directory as
// Server-Sent Events. No body is held whole: each is copied between the client and the provider a
// buffer at a time.

// fileRoutes are the operations of streamed files.
func (s *Server) fileRoutes() []route {
	return []route{
		{http.MethodPut, "/v1/sandboxes/{sandboxId}/files/raw", s.putRawFile},
		{http.MethodGet, "/v1/sandboxes/{sandboxId}/files/raw", s.getRawFile},
		{http.MethodGet, "/v1/sandboxes/{sandboxId}/files/upload", s.uploadState},
		{http.MethodPut, "/v1/sandboxes/{sandboxId}/files/archive", s.putArchive},
		{http.MethodGet, "/v1/sandboxes/{sandboxId}/files/archive", s.getArchive},
		{http.MethodGet, "/v1/sandboxes/{sandboxId}/files/watch", s.watchFiles},
	}
}

// streamBody is a request body to stream to the provider, under the same pace as a JSON body's
// (timedBody): past ReadBodyTimeout and a second for every 64 KiB, it is cut off.
func (s *Server) streamBody(w http.ResponseWriter, r *http.Request) (io.Reader, func()) {
	rc := http.NewResponseController(w)
	tb := &timedBody{ReadCloser: r.Body, rc: rc, start: time.Now(), grace: s.bodyTimeout}
	return tb, func() { _ = rc.SetReadDeadline(time.Time{}) }
}

// putRawFile: PUT /v1/sandboxes/{sandboxId}/files/raw?path=&expectedGeneration=[&upload=&offset=].
func (s *Server) putRawFile(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, err := expectedGeneration(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	put := sandbox.FilePut{Path: q.Get("path"), Upload: q.Get("upload"), Length: r.ContentLength}
	if err := checkPath(put.Path); err != nil {
		return err
	}
	if put.Offset, err = queryInt(r, "offset", 0); err != nil {
		return err
	}
	if put.Upload != "" && !sandbox.UploadIDValid(put.Upload) {
		return fmt.Errorf("upload %.80q: want 8 to 64 of [A-Za-z0-9_-]: %w", put.Upload, sandbox.ErrInvalidRequest)
	}
	if put.Offset != 0 && put.Upload == "" {
		return fmt.Errorf("offset %d without an upload: %w", put.Offset, sandbox.ErrInvalidRequest)
	}
	if put.Digest, err = reprDigest(r.Header); err != nil {
		return err
	}
	if put.TrailerDigest, err = trailerDigest(r); err != nil {
		return err
	}
	body, done := s.streamBody(w, r)
	fw, err := s.rt.PutFile(r.Context(), sandboxID(r), gen, put, body)
	done()
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("the body did not arrive within %v and a second for every 64 KiB of it: %w", s.bodyTimeout, sandbox.ErrInvalidRequest)
		}
		return err
	}
	d := formatDigest(fw.Digest)
	w.Header().Set("Repr-Digest", d)
	writeJSON(w, http.StatusOK, api.RawFileWritten{Path: fw.Path, Size: fw.Size, Digest: d})
	return nil
}

// reprDigest reads the sha-256 member of a Repr-Digest header (RFC 9530: a dictionary of
// algorithm=:base64:); nil when there is none. Other algorithms are not checked.
func reprDigest(h http.Header) ([]byte, error) {
	for _, v := range h.Values("Repr-Digest") {
		for _, member := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(member), "=")
			if !ok || strings.TrimSpace(k) != "sha-256" {
				continue
			}
			val = strings.TrimSpace(val)
			if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
				return nil, fmt.Errorf("Repr-Digest sha-256 %.80q is not :base64: (RFC 9530): %w", val, sandbox.ErrInvalidRequest)
			}
			sum, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1])
			if err != nil || len(sum) != 32 {
				return nil, fmt.Errorf("Repr-Digest sha-256 %.80q is not 32 bytes of base64: %w", val, sandbox.ErrInvalidRequest)
			}
			return sum, nil
		}
	}
	return nil, nil
}

// trailerDigest checks the trailers of a raw write: a Repr-Digest, and nothing else, only after a
// chunked body (net/http leaves the Trailer header in place on any other). For a chunked body it
// returns the function that reads the trailer once the body has ended: nil when none came.
func trailerDigest(r *http.Request) (func() ([]byte, error), error) {
	if len(r.Header.Values("Trailer")) > 0 {
		return nil, fmt.Errorf("a Trailer header on a body that is not chunked: a trailer follows only a chunked body: %w", sandbox.ErrInvalidRequest)
	}
	if err := onlyReprDigest(r.Trailer); err != nil {
		return nil, err
	}
	if r.ContentLength >= 0 {
		return nil, nil
	}
	return func() ([]byte, error) {
		if err := onlyReprDigest(r.Trailer); err != nil {
			return nil, err
		}
		sum, err := reprDigest(r.Trailer)
		if err != nil {
			return nil, fmt.Errorf("the trailer: %w", err)
		}
		return sum, nil
	}, nil
}

// onlyReprDigest refuses a trailer other than Repr-Digest.
func onlyReprDigest(t http.Header) error {
	for k := range t {
		if k != "Repr-Digest" {
			return fmt.Errorf("trailer %.80q: a raw write takes no trailer but Repr-Digest: %w", k, sandbox.ErrInvalidRequest)
		}
	}
	return nil
}

// formatDigest is a SHA-256 as RFC 9530 writes it.
func formatDigest(sum []byte) string {
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum) + ":"
}

// uploadState: GET /v1/sandboxes/{sandboxId}/files/upload?path=&upload=&expectedGeneration=.
func (s *Server) uploadState(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, err := expectedGeneration(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	path, upload := q.Get("path"), q.Get("upload")
	if err := checkPath(path); err != nil {
		return err
	}
	fw, err := s.rt.UploadState(r.Context(), sandboxID(r), gen, path, upload)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, api.UploadState{Path: path, Upload: upload, Offset: fw.Size})
	return nil
}

// parseByteRange reads a Range header of one range, "bytes=START-[END]". Anything else (several
// ranges, a suffix range, another unit) is nil: the whole file is answered, as RFC 9110 allows.
func parseByteRange(v string) (*sandbox.FileRange, error) {
	spec, ok := strings.CutPrefix(v, "bytes=")
	spec = strings.TrimSpace(spec)
	if v == "" || !ok || strings.Contains(spec, ",") || strings.HasPrefix(spec, "-") {
		return nil, nil
	}
	return sandbox.ParseFileRange(spec)
}

// copyBufs are the buffers of streamed answers.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// getRawFile: GET /v1/sandboxes/{sandboxId}/files/raw?path=&expectedGeneration=, with Range. A read of
// the whole file carries its Repr-Digest; a ranged one does when the client sends Want-Repr-Digest.
func (s *Server) getRawFile(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, path, err := generationAndPath(r)
	if err != nil {
		return err
	}
	rng, err := parseByteRange(r.Header.Get("Range"))
	if err != nil {
		return err
	}
	want := strings.Contains(r.Header.Get("Want-Repr-Digest"), "sha-256")
	rd, err := s.rt.GetFile(r.Context(), sandboxID(r), gen, path, rng, want)
	if err != nil {
		return err
	}
	defer rd.Close()
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Accept-Ranges", "bytes")
	if rng != nil && rd.Start >= rd.Size {
		h.Set("Content-Range", "bytes */"+strconv.FormatInt(rd.Size, 10))
		writeJSON(w, http.StatusRequestedRangeNotSatisfiable, api.ErrorResponse{Error: api.ErrorBody{Code: sandbox.CodeInvalidRequest,
			Message: fmt.Sprintf("range from byte %d of a file of %d bytes", rd.Start, rd.Size)}})
		return nil
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.FormatInt(rd.Length, 10))
	if rd.Digest != nil {
		h.Set("Repr-Digest", formatDigest(rd.Digest))
	}
	status := http.StatusOK
	if rng != nil {
		status = http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", rd.Start, rd.Start+rd.Length-1, rd.Size))
	}
	w.WriteHeader(status)
	s.copyOut(w, rd)
	return nil
}

// copyOut copies a stream to the client, each write bounded by the stream write timeout; past the
// head, a failure can only cut the answer short, which its Content-Length (or the tar's missing end)
// lets the client see.
func (s *Server) copyOut(w http.ResponseWriter, src io.Reader) {
	rc := http.NewResponseController(w)
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	buf := *bp
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if derr := rc.SetWriteDeadline(time.Now().Add(s.writeTimeout)); derr != nil && !errors.Is(derr, http.ErrNotSupported) {
				panic(http.ErrAbortHandler)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				panic(http.ErrAbortHandler)
			}
		}
		if err == io.EOF {
			_ = rc.SetWriteDeadline(time.Time{})
			return
		}
		if err != nil {
			s.log.Warn("stream cut short", "err", err)
			panic(http.ErrAbortHandler)
		}
	}
}

// putArchive: PUT /v1/sandboxes/{sandboxId}/files/archive?path=DIR&expectedGeneration=, a tar body.
func (s *Server) putArchive(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, dir, err := generationAndPath(r)
	if err != nil {
		return err
	}
	body, done := s.streamBody(w, r)
	aw, err := s.rt.PutArchive(r.Context(), sandboxID(r), gen, dir, body)
	done()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ArchiveWritten{Path: aw.Path, Entries: aw.Entries, Bytes: aw.Bytes})
	return nil
}

// getArchive: GET /v1/sandboxes/{sandboxId}/files/archive?path=DIR&expectedGeneration=, a tar stream.
func (s *Server) getArchive(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, dir, err := generationAndPath(r)
	if err != nil {
		return err
	}
	rc, err := s.rt.GetArchive(r.Context(), sandboxID(r), gen, dir)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	s.copyOut(w, rc)
	return nil
}

// watchFiles: GET /v1/sandboxes/{sandboxId}/files/watch?path=DIR&expectedGeneration=[&recursive=true].
// Server-Sent Events: "change" (a FileChangeEvent), "overflow" when changes were dropped, a heartbeat
// comment every heartbeat interval, and last, always, "end" (a ProcessEndEvent's reasons) when the
// sandbox is terminated or recreated, the directory goes, the agent stops answering, or the daemon
// stops. A pause holds the watch (waitPaused), its heartbeats saying so, and the changes go on after
// the resume; a watch the pause broke (the agent's stream) is opened again, with an overflow event,
// since changes may have been missed.
func (s *Server) watchFiles(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, err := expectedGeneration(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	dir := q.Get("path")
	if err := checkPath(dir); err != nil {
		return err
	}
	recursive := q.Get("recursive") == "true"
	id, ctx := sandboxID(r), r.Context()
	wake, stop := s.rt.Watch()
	defer stop()
	fw, err := s.rt.WatchFiles(ctx, id, gen, dir, recursive)
	if err != nil {
		return err
	}
	defer func() { fw.Close() }()
	sendSSE := s.startSSE(w)
	send := func(b []byte) bool {
		return sendSSE(func() bool {
			_, err := w.Write(b)
			return err == nil
		})
	}
	event := func(name string, v any) bool {
		data, _ := json.Marshal(v)
		return send(append(append([]byte("event: "+name+"\ndata: "), data...), "\n\n"...))
	}
	end := func(e processEndEvent) error {
		event("end", e)
		return nil
	}
	// pause waits out a pause, the provider's watch held meanwhile; ok false: the client went away.
	pause := func() (e processEndEvent, ok bool) {
		hold(fw, true)
		defer hold(fw, false)
		e, ok = s.waitPaused(ctx, wake, id, gen, s.heartbeat, func() bool { return send(heartbeatEvent(statePaused, -1)) })
		if ok && e.Reason == "" {
			ok = send(heartbeatEvent(stateRunning, -1))
		}
		return e, ok
	}
	if !send([]byte(": stream\n\n")) {
		return nil
	}
	beat := time.NewTicker(s.heartbeat)
	defer beat.Stop()
	pausedSince := false // a pause came since fw was opened
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.done:
			return end(processEndEvent{Reason: endDaemonStopping})
		case <-beat.C:
			if !send([]byte(": heartbeat\n\n")) {
				return nil
			}
		case <-wake:
			switch e := s.endOf(ctx, id, gen, nil); e.Reason {
			case "":
			case endPaused:
				pausedSince = true
				e, ok := pause()
				if !ok {
					return nil
				}
				if e.Reason != "" {
					return end(e)
				}
			default:
				return end(e)
			}
		case c, ok := <-fw.Changes():
			if !ok {
				err := fw.Err()
				e := s.endOf(ctx, id, gen, err)
				if e.Reason == endPaused {
					pausedSince = true
					var alive bool
					if e, alive = pause(); !alive {
						return nil
					}
				}
				if e.Reason != "" {
					return end(e)
				}
				if pausedSince && errors.Is(err, sandbox.ErrProviderUnavailable) {
					// The pause broke the provider's watch: a new one, and word that changes may be lost.
					fw.Close() // before the new one: it counts against the sandbox's watches
					nw, werr := s.rt.WatchFiles(ctx, id, gen, dir, recursive)
					if werr == nil {
						fw, pausedSince = nw, false
						if !event("overflow", sandbox.FileChange{Kind: sandbox.FileOverflow}) {
							return nil
						}
						continue
					}
					err = werr
				}
				reason := endAgent
				if errors.Is(err, sandbox.ErrNotFound) {
					reason = endError // the directory went
				}
				msg := "the watch ended"
				if err != nil {
					msg = err.Error()
				}
				return end(processEndEvent{Reason: reason, Message: msg})
			}
			name := "change"
			if c.Kind == sandbox.FileOverflow {
				name = "overflow"
			}
			if !event(name, c) {
				return nil
			}
		}
	}
}

// hold tells the provider's watch that the sandbox is paused, or runs again (sandbox.WatchHolder).
func hold(fw sandbox.FileWatch, paused bool) {
	if h, ok := fw.(sandbox.WatchHolder); ok {
		h.Hold(paused)
	}
}
