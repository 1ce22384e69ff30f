package etcdstore

import (
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// layout names the etcd keys of one prefix; see the package documentation.
type layout struct {
	prefix string // "/graygate/prod/"

	rulesDir   string // prefix + "rules/"
	historyDir string // prefix + "history/"
	metaDir    string // prefix + "meta/"
	revision   string // prefix + "meta/revision"
	global     string // prefix + "meta/global"

	// viewStart and viewEnd bound the range that holds the whole current
	// state, meta/ and rules/ and nothing else of ours ("history/" and
	// "instances/" sort before "meta/"), so that one range read or one
	// watch covers it.
	viewStart, viewEnd string
}

func newLayout(prefix string) layout {
	l := layout{
		prefix:     prefix,
		rulesDir:   prefix + "rules/",
		historyDir: prefix + "history/",
		metaDir:    prefix + "meta/",
		revision:   prefix + "meta/revision",
		global:     prefix + "meta/global",
	}
	l.viewStart = l.metaDir
	l.viewEnd = clientv3.GetPrefixRangeEnd(l.rulesDir)
	return l
}

func (l layout) rule(key string) string { return l.rulesDir + key }

// historyOf is the directory of key's history records; key is a rule key
// or store.GlobalKey.
func (l layout) historyOf(key string) string { return l.historyDir + key + "/" }

// versionDigits zero-pads versions so that etcd's byte order of the keys is
// their numeric order: 19 digits hold any positive int64.
const versionDigits = 19

func (l layout) historyKey(key string, version int64) string {
	return fmt.Sprintf("%s%0*d", l.historyOf(key), versionDigits, version)
}

// versionOf parses the version from a history key of key.
func (l layout) versionOf(key, hkey string) (int64, error) {
	s, ok := strings.CutPrefix(hkey, l.historyOf(key))
	if !ok || len(s) != versionDigits {
		return 0, fmt.Errorf("history key %q is not of the form %s<%d digits>", hkey, l.historyOf(key), versionDigits)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("history key %q: bad version", hkey)
	}
	return v, nil
}
