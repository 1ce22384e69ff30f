// This module pins h2spec (github.com/summerwind/h2spec v2.2.1, an HTTP/2
// conformance test suite) and its dependencies, for scripts/h2spec.sh and
// the data plane's conformance test. It is a tool, not part of graygate.
module github.com/graygate/graygate/tools/h2spec

go 1.26.8

require (
	github.com/fatih/color v1.19.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/summerwind/h2spec v2.2.1+incompatible // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
