// Package version mimics the shape of k8s.io/component-base/version: string
// variables set by the linker (-X) and Get, which reports them.
package version

// Set by -ldflags -X; these defaults are what a build without -X reports.
var (
	gitMajor     = ""
	gitMinor     = ""
	gitVersion   = "v0.0.0-master+$Format:%H$"
	gitCommit    = "$Format:%H$"
	gitTreeState = ""
	buildDate    = "1970-01-01T00:00:00Z"
)

// Info is what Get returns.
type Info struct {
	Major        string
	Minor        string
	GitVersion   string
	GitCommit    string
	GitTreeState string
	BuildDate    string
}
