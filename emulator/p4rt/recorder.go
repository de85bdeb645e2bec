package p4rt

import p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

// Recorder is a Device that keeps every update written through it, in
// order, before the device applies it: what a controller wrote, for tests
// to check or to replay (fuzz targets seed themselves with real requests
// this way).
type Recorder struct {
	Device
	Updates []*p4v1.Update
}

// Write implements Device.
func (r *Recorder) Write(updates []*p4v1.Update) error {
	r.Updates = append(r.Updates, updates...)
	return r.Device.Write(updates)
}
