package image_test

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
)

// sparseTar is a tar stream of one PAX 1.0 sparse file "huge" of size bytes whose only data is its last
// byte. archive/tar reads such files but writes none, so the blocks are laid out here.
func sparseTar(t *testing.T, size int64) []byte {
	t.Helper()
	var out bytes.Buffer
	block := func(b []byte) {
		out.Write(b)
		if pad := len(b) % 512; pad != 0 {
			out.Write(make([]byte, 512-pad))
		}
	}
	record := func(k, v string) string {
		body := " " + k + "=" + v + "\n"
		n := len(body) + 1
		for len(strconv.Itoa(n))+len(body) != n {
			n++
		}
		return strconv.Itoa(n) + body
	}
	sparseMap := []byte(fmt.Sprintf("1\n%d\n1\n", size-1))
	mapLen := len(sparseMap) + (512-len(sparseMap)%512)%512
	pax := record("GNU.sparse.major", "1") + record("GNU.sparse.minor", "0") +
		record("GNU.sparse.name", "huge") + record("GNU.sparse.realsize", strconv.FormatInt(size, 10))
	block(header("PaxHeaders/huge", 'x', int64(len(pax))))
	block([]byte(pax))
	block(header("GNUSparseFile.0/huge", '0', int64(mapLen+1)))
	block(sparseMap)
	block([]byte{'z'})
	out.Write(make([]byte, 1024))
	return out.Bytes()
}

// header is a ustar header block.
func header(name string, typ byte, size int64) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	copy(h[100:108], "0000644\x00")
	copy(h[108:116], "0000000\x00")
	copy(h[116:124], "0000000\x00")
	copy(h[124:136], fmt.Sprintf("%011o\x00", size))
	copy(h[136:148], "00000000000\x00")
	h[156] = typ
	copy(h[257:263], "ustar\x00")
	copy(h[263:265], "00")
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}
