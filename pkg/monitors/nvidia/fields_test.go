package nvidia

import "encoding/binary"

// UintField builds a successful FieldValue holding v as an unsigned long
// long, the type NVML uses for counters (fixtures and fakes).
func UintField(id uint32, v uint64) FieldValue {
	f := FieldValue{ID: id, ValueType: valueTypeUnsignedLongLong}
	binary.LittleEndian.PutUint64(f.Raw[:], v)
	return f
}
