//go:build !dynamic

package version

// Get reads gitVersion directly (Kubernetes before 1.28).
//
//go:noinline
func Get() Info {
	return Info{
		Major:        gitMajor,
		Minor:        gitMinor,
		GitVersion:   gitVersion,
		GitCommit:    gitCommit,
		GitTreeState: gitTreeState,
		BuildDate:    buildDate,
	}
}
