package admin

import (
	"net/http"

	"github.com/graygate/graygate/internal/rule"
)

// layersView is the document GET /api/v1/layers returns.
type layersView struct {
	Revision int64        `json:"revision"`
	Layers   []rule.Layer `json:"layers"`
	Holdout  *holdoutView `json:"holdout,omitempty"`
}

type holdoutView struct {
	Percent float64 `json:"percent"`
	Salt    string  `json:"salt"`
}

// layers lists the serving snapshot's layers: each with its rules, their
// ranges and the free slots, and the holdout when one is configured.
func (s *Server) layers(w http.ResponseWriter, r *http.Request, _ principal) {
	snap := s.opts.Router.Load()
	v := layersView{Revision: snap.Revision, Layers: snap.Layers()}
	if h := snap.Holdout(); h != nil {
		v.Holdout = &holdoutView{Percent: h.Percent, Salt: h.Salt}
	}
	writeJSON(w, http.StatusOK, v)
}
