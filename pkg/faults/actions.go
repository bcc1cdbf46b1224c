package faults

// Action is the typed form of a firing fault: one type per fault, defined
// beside the catalog in catalog.go. Faults without `after` carry the
// delay modifier as Delay: the launcher waits that long at the point before
// acting. Faults with `after` carry after+delay as After.
type Action interface {
	// FaultName returns the catalog name of the fault.
	FaultName() string
}

// Find returns the action of type T among the decisions, if that fault
// fires.
func Find[T Action](d Decisions) (T, bool) {
	for _, x := range d {
		if a, ok := x.Action.(T); ok {
			return a, true
		}
	}
	var zero T
	return zero, false
}
