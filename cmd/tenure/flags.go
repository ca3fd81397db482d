package main

import (
	"flag"
	"fmt"
	"log/slog"
)

// aliasValue is a deprecated spelling of a flag: setting it sets the flag
// it stands for, so that command lines written for an older release keep
// working; the command warns once it has parsed them (warnDeprecated).
type aliasValue struct {
	flag.Value // the new flag's
	name       string
}

func (a *aliasValue) String() string {
	if a == nil || a.Value == nil {
		return "" // the zero value flag.PrintDefaults makes
	}
	return a.Value.String()
}

func (a *aliasValue) IsBoolFlag() bool {
	b, ok := a.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// deprecatedAlias defines old as a deprecated spelling of the flag name,
// which must be defined already.
func deprecatedAlias(fs *flag.FlagSet, old, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("deprecatedAlias: no flag --" + name) // a programming error, caught by every test of the command
	}
	fs.Var(&aliasValue{Value: f.Value, name: name}, old, "deprecated: use --"+name)
	fs.Lookup(old).DefValue = "" // the new flag's help shows the default
}

// deprecations returns a one-line warning for each deprecated spelling the
// command line used.
func deprecations(fs *flag.FlagSet) []string {
	var out []string
	fs.Visit(func(f *flag.Flag) {
		if a, ok := f.Value.(*aliasValue); ok {
			out = append(out, fmt.Sprintf("--%s is deprecated; use --%s", f.Name, a.name))
		}
	})
	return out
}

// warnDeprecated logs the deprecations of a command that logs.
func warnDeprecated(fs *flag.FlagSet, log *slog.Logger) {
	for _, d := range deprecations(fs) {
		log.Warn(d)
	}
}
