package admin

import (
	"errors"

	"github.com/graygate/graygate/internal/strict"
)

// decodeStrict decodes a request body as strict.Decode does, and also
// refuses a member name given twice in one object (strict.DuplicateKeys).
func decodeStrict(body []byte, v any) error {
	return errors.Join(strict.DuplicateKeys(body), strict.Decode(body, v))
}
