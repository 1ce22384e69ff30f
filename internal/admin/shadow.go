package admin

import (
	"fmt"
	"net/http"
)

// ruleDiff answers GET /api/v1/rules/{key}/diff: the diff document of the
// rule's mirror (mirror.Document), 404 for a rule without a mirror.
func (s *Server) ruleDiff(w http.ResponseWriter, r *http.Request, _ principal) {
	key := r.PathValue("key")
	c, ok := s.opts.Router.Load().RuleSet[key]
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no rule %q is serving", key), nil)
		return
	}
	if c.Mirror == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("rule %q has no mirror: add \"mirror\" to the rule to shadow its stable traffic", key), nil)
		return
	}
	doc, ok := s.opts.Mirrors.Diff(key)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("rule %q has no running mirror yet", key), nil)
		return
	}
	writeJSON(w, http.StatusOK, doc)
}
