package listener

import (
	"errors"
	"runtime"
	"testing"
)

func TestListen(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := Listen("tcp", ln.Addr().String(), false); err == nil {
		t.Error("a second plain Listen on a bound port succeeded")
	}
	if _, err := Listen("tcp", ln.Addr().String(), true); err == nil {
		t.Error("SO_REUSEPORT joined a socket bound without it")
	} else if runtime.GOOS != "linux" && !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Listen with reusePort on %s: %v, want ErrUnsupported", runtime.GOOS, err)
	}
}
