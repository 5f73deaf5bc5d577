package transport

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// TestConfigCarriesEveryPresenceSetting: each setting of presence.Config
// but the Hub's own (OnStep) is a field of Config of the same name and
// type, and reaches the Node as it was set.
func TestConfigCarriesEveryPresenceSetting(t *testing.T) {
	var cfg Config
	src := reflect.ValueOf(&cfg).Elem()
	pt := reflect.TypeFor[presence.Config]()
	for i := range pt.NumField() {
		f := pt.Field(i)
		if f.Name == "OnStep" {
			continue
		}
		tf, ok := src.Type().FieldByName(f.Name)
		if !assert.True(t, ok, "transport.Config lacks presence.Config's %s", f.Name) {
			continue
		}
		require.Equal(t, f.Type, tf.Type, "transport.Config.%s", f.Name)
		v := src.FieldByIndex(tf.Index)
		// A value of the field's own type, not its zero.
		switch v.Kind() {
		case reflect.Int, reflect.Int64:
			v.SetInt(int64(100 + i))
		case reflect.Func:
			v.Set(reflect.MakeFunc(f.Type, func([]reflect.Value) []reflect.Value { return nil }))
		case reflect.Pointer:
			v.Set(reflect.New(f.Type.Elem()))
		case reflect.Interface: // the Engine
			v.Set(reflect.ValueOf(presence.NewMemoryEngine()))
		default:
			t.Fatalf("presence.Config.%s: a %v; teach this test to set one", f.Name, v.Kind())
		}
	}
	pc := cfg.presence()
	got := reflect.ValueOf(pc)
	for i := range pt.NumField() {
		name := pt.Field(i).Name
		if name == "OnStep" {
			continue
		}
		want := src.FieldByName(name)
		assert.False(t, got.Field(i).IsZero(), "presence.Config.%s was not passed on", name)
		if want.Kind() == reflect.Int || want.Kind() == reflect.Int64 {
			assert.Equal(t, want.Int(), got.Field(i).Int(), "presence.Config.%s", name)
		}
	}
}
