package identity

// ID is who a request is, and where that answer came from.
type ID struct {
	// Value is the user id used for bucketing. It is never empty once resolved.
	Value string `json:"value"`
	// Source names where Value came from: "header:X-User-Id", "cookie:user_id",
	// "query:user_id", "jwt:sub", "anonymous-cookie" or "anonymous-ip".
	Source string `json:"source"`
	// Issued is true when the id was freshly generated for an anonymous
	// visitor; the data plane must then set Cookie on the response.
	Issued bool `json:"issued,omitempty"`
	// Cookie is the name of the cookie that carries an issued id.
	Cookie string `json:"cookie,omitempty"`
}
