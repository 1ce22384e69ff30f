package admin

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/graygate/graygate/internal/experiment"
	"github.com/graygate/graygate/internal/strict"
)

// experimentResults serves GET /api/v1/experiments/{key}/results: key is
// an ab rule's key (or an experiment_id).
func (s *Server) experimentResults(w http.ResponseWriter, r *http.Request, _ principal) {
	res, err := s.opts.Experiments.Results(r.Context(), r.PathValue("key"))
	switch {
	case errors.Is(err, experiment.ErrUnknown):
		writeError(w, http.StatusNotFound, err.Error(), nil)
	case errors.Is(err, experiment.ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, err.Error(), nil)
	case err != nil:
		writeError(w, http.StatusUnprocessableEntity, "the experiment's results cannot be computed", strict.Fields(err))
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// eventsError is the 400 answer to a batch with rejected events: every
// problem by index and field, and how many events were recorded anyway.
type eventsError struct {
	Error string `json:"error"`
	experiment.EventsResult
}

// postEvents serves POST /api/v1/events. Events are judged one by one:
// the valid ones are recorded, and a batch with any invalid event is a 400
// that lists them (events[3].metric: unknown metric "x") and says how
// many were recorded.
func (s *Server) postEvents(w http.ResponseWriter, r *http.Request, _ principal) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	res, err := s.opts.Experiments.PostEvents(r.Context(), body)
	var bad *experiment.BadBody
	var busy *experiment.BusyError
	switch {
	case errors.As(err, &bad):
		writeError(w, http.StatusBadRequest, "invalid events body; nothing was recorded", strict.Fields(err))
	case errors.As(err, &busy):
		// The experiment store does not take events and the buffer in
		// front of it is full: nothing was recorded; come back later.
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(busy.RetryAfter.Seconds()))))
		writeError(w, http.StatusServiceUnavailable, err.Error(), nil)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error(), nil)
	case res.Rejected > 0:
		writeJSON(w, http.StatusBadRequest, eventsError{
			Error:        fmt.Sprintf("%d of %d events rejected; the other %d were recorded", res.Rejected, res.Rejected+res.Accepted, res.Accepted),
			EventsResult: res,
		})
	default:
		writeJSON(w, http.StatusOK, res)
	}
}
