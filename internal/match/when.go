package match

import (
	"errors"

	"github.com/graygate/graygate/internal/tags"
	"github.com/graygate/graygate/internal/when"
)

// EvalWhen evaluates a rule's CEL "when" expression against the request.
// The expression reads the request through a copy of f that lives on the
// heap for the call (CEL holds its input behind an interface), and what it
// resolved is copied back, so f itself stays on the caller's stack and a
// request that meets no CEL rule allocates nothing.
func (f *Facts) EvalWhen(e *when.Expr) (bool, error) {
	in := &celInput{f: *f}
	ok, err := e.Eval(in)
	*f = in.f
	return ok, err
}

// celInput is when.Input over a request's Facts.
type celInput struct{ f Facts }

func (c *celInput) Path() string                      { return c.f.Req.Path() }
func (c *celInput) Method() string                    { return c.f.Req.Method() }
func (c *celInput) Header(name string) (string, bool) { return c.f.Req.Header(name) }
func (c *celInput) Query(name string) (string, bool)  { return c.f.Req.Query(name) }
func (c *celInput) Cookie(name string) (string, bool) { return c.f.Req.Cookie(name) }
func (c *celInput) UserID() string                    { return c.f.UID }
func (c *celInput) ClientIP() string {
	ip := c.f.Req.ClientIP()
	if !ip.IsValid() {
		return ""
	}
	return ip.String()
}

func (c *celInput) Tag(name string) (string, bool) {
	res := c.f.Tags()
	v, ok := res.Tags[name]
	return v, ok
}

func (c *celInput) TagsErr() error {
	res := c.f.Tags()
	if res.Status != tags.Unknown {
		return nil
	}
	if res.Err != nil {
		return res.Err
	}
	return errTagsUnknown
}

// errTagsUnknown is TagsErr's answer for Unknown tags that carry no reason.
var errTagsUnknown = errors.New("a tag source did not answer")

func (c *celInput) TagNames() []string {
	res := c.f.Tags()
	names := make([]string, 0, len(res.Tags))
	for k := range res.Tags {
		names = append(names, k)
	}
	return names
}

func (c *celInput) Region() (country, province, city string, ok bool) {
	r, ok := c.f.Region()
	if !ok {
		return "", "", "", false
	}
	return r.Country, r.Province, r.City, true
}
