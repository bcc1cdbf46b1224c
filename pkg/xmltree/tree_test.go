package xmltree

import "testing"

func TestGraftPutsBackWhatTheOtherTreeLacks(t *testing.T) {
	src, err := Parse(`<domain type="qemu"><on_crash>destroy</on_crash><devices><panic model="isa"><address type="isa" iobase="0x505"/></panic><disk name="a"/><disk name="b"/></devices></domain>`)
	if err != nil {
		t.Fatal(err)
	}
	// What a hook returned through a type without on_crash or the address,
	// having added a sysinfo of its own.
	dst, err := Parse(`<domain type="qemu"><sysinfo type="smbios"/><devices><panic model="isa"/><disk name="a"/><disk name="b"/></devices></domain>`)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"domain/on_crash", "domain/devices/panic/address", "domain/devices/disk[1]@name"} {
		want := p != "domain/devices/disk[1]@name" // present already: left as it is
		if got := Graft(dst, src, p); got != want {
			t.Errorf("Graft(%s) = %v, want %v", p, got, want)
		}
	}
	if Graft(dst, src, "domain/nowhere/x") {
		t.Error("grafted below a parent that neither has")
	}
	back, err := Parse(dst.XML())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Parse(`<domain type="qemu"><sysinfo type="smbios"/><devices><panic model="isa"><address iobase="0x505" type="isa"/></panic><disk name="a"/><disk name="b"/></devices><on_crash>destroy</on_crash></domain>`)
	if d := Compare(want, back); len(d) != 0 {
		t.Errorf("after the grafts: %v\n%s", d, dst.XML())
	}
}

func TestXMLDeclaresTheQEMUNamespaceAndEscapes(t *testing.T) {
	n, err := Parse(`<domain xmlns:qemu="http://libvirt.org/schemas/domain/qemu/1.0"><name>a&amp;b</name><qemu:commandline><qemu:arg value="-x &lt;y&gt;"/></qemu:commandline></domain>`)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(n.XML())
	if err != nil {
		t.Fatalf("%v: %s", err, n.XML())
	}
	if d := Compare(n, back); len(d) != 0 {
		t.Errorf("round trip: %v\n%s", d, n.XML())
	}
	if back.Child("qemu:commandline") == nil {
		t.Errorf("the QEMU namespace was lost: %s", n.XML())
	}
}
