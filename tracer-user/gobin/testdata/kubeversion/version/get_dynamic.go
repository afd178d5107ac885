//go:build dynamic

package version

import "sync/atomic"

// dynamicGitVersion holds gitVersion, stored by init (Kubernetes 1.28+).
var dynamicGitVersion atomic.Value

func init() {
	dynamicGitVersion.Store(gitVersion)
}

// Get reads the version through dynamicGitVersion, so its code never loads
// gitVersion itself: only init does.
//
//go:noinline
func Get() Info {
	v, _ := dynamicGitVersion.Load().(string)
	return Info{
		Major:        gitMajor,
		Minor:        gitMinor,
		GitVersion:   v,
		GitCommit:    gitCommit,
		GitTreeState: gitTreeState,
		BuildDate:    buildDate,
	}
}
