package transport

import (
	"reflect"

	"github.com/presenced/presenced/presence"
)

// presence returns the presence.Config that c's presence settings make:
// every field of presence.Config that Config has under the same name, so
// a setting of the Node is documented, defaulted and checked once, there.
// TestConfigCarriesEveryPresenceSetting fails when one is missing here.
func (c *Config) presence() presence.Config {
	var pc presence.Config
	dst, src := reflect.ValueOf(&pc).Elem(), reflect.ValueOf(c).Elem()
	for i := range dst.NumField() {
		if f := src.FieldByName(dst.Type().Field(i).Name); f.IsValid() {
			dst.Field(i).Set(f)
		}
	}
	return pc
}
