package telemetry

import (
	"cmp"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version and Revision override what the binary's embedded build information says; the
// Dockerfile sets them with -ldflags "-X" because its build context has no .git.
var (
	Version  string
	Revision string
)

// Build describes the running binary.
type Build struct {
	Version   string // module version, "(devel)" for a local build, or Version
	Revision  string // VCS revision (with "-dirty" for a modified tree), or Revision; "unknown" without either
	GoVersion string // the toolchain that built it
}

// ReadBuild returns the running binary's build description from runtime/debug.ReadBuildInfo,
// overridden by Version and Revision when set.
func ReadBuild() Build {
	b := Build{GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.Version = bi.Main.Version
		b.GoVersion = cmp.Or(bi.GoVersion, b.GoVersion)
		var rev string
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" && dirty {
			rev += "-dirty"
		}
		b.Revision = rev
	}
	b.Version = cmp.Or(Version, b.Version, "unknown")
	b.Revision = cmp.Or(Revision, b.Revision, "unknown")
	return b
}

// NewBuildInfo returns the bookrecon_build_info{version,revision,goversion} gauge, always 1.
func NewBuildInfo() prometheus.Collector {
	b := ReadBuild()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "bookrecon_build_info",
		Help:        "Always 1; the labels say which build of bookrecon is running.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}
