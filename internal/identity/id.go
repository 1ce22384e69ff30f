package identity

// ID is who a request is, and where that answer came from.
type ID struct {
	// Value is the user id used for bucketing. It is never empty once
	// resolved, unless Refused is set.
	Value string `json:"value"`
	// Source names where Value came from: "header:X-User-Id", "cookie:user_id",
	// "query:user_id", "jwt:sub", "anonymous-cookie" or "anonymous-ip".
	Source string `json:"source"`
	// Issued is true when the id was freshly generated for an anonymous
	// visitor; the data plane must then set Cookie on the response.
	Issued bool `json:"issued,omitempty"`
	// Cookie is the name of the cookie that carries an issued id.
	Cookie string `json:"cookie,omitempty"`
	// Refused, when set, says why the value the request offered cannot be
	// its identity (a value over identity.max_length). Value is then empty,
	// and the data plane must answer 400 with Refused.Message and send the
	// request nowhere: not to the rate limiter, not upstream.
	Refused *Refusal `json:"refused,omitempty"`
	// IPv6Prefix is the resolver's identity.ipv6_prefix, for the address
	// id the data plane keys an issued id's rate limit by
	// (AppendAddressID). 0 means the whole address.
	IPv6Prefix uint8 `json:"-"`
}

// Refusal is why a request's identity was refused.
type Refusal struct {
	// Reason is a metric label: ReasonTooLong.
	Reason string `json:"reason"`
	// Message is for the client and the operator, e.g. `identity
	// "X-User-Id" is 16384 bytes, over identity.max_length 256`.
	Message string `json:"message"`
}

// ReasonTooLong is the Refusal.Reason of a value over identity.max_length.
const ReasonTooLong = "too_long"
