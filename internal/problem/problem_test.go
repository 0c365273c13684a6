package problem_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bookrecon/bookrecon/internal/problem"
)

// TestWrite: the RFC 9457 body, its media type, no-store, and the problem's own headers; With
// leaves the problem it copies unchanged.
func TestWrite(t *testing.T) {
	t.Parallel()
	base := problem.New(http.StatusConflict, "request_in_progress", "a request with this key is running; retry <later>")
	d := base.With("Retry-After", "1")
	rec := httptest.NewRecorder()
	if code := problem.Write(rec, d); code != 409 {
		t.Errorf("Write = %d, want 409", code)
	}
	want := `{"type":"about:blank","title":"Conflict","status":409,"code":"request_in_progress","detail":"a request with this key is running; retry <later>"}` + "\n"
	if rec.Code != 409 || rec.Body.String() != want || rec.Header().Get("Content-Type") != "application/problem+json" ||
		rec.Header().Get("Cache-Control") != "no-store" || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("wrote %d %v %s\nwant 409 %s", rec.Code, rec.Header(), rec.Body.String(), want)
	}
	if base.Header != nil || d.Error() != "request_in_progress: a request with this key is running; retry <later>" {
		t.Errorf("With changed the original (%v), or Error = %q", base.Header, d.Error())
	}
}
