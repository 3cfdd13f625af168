package sim

import (
	"strconv"
	"strings"
	"testing"
)

// measuredAdvances are the advance widths, in thousandths of an em, of the
// printable ASCII characters (space to ~) in the bold faces a viewer may pick for
// svgFont, measured in Chromium with canvas measureText at 100px. Bold is wider
// than regular in both, so these bound regular text too.
var measuredAdvances = []struct{ font, widths string }{
	{"DejaVu Sans Bold", "348 456 521 838 696 1002 872 306 457 457 523 838 380 415 380 365 696 696 696 696 696 696 696 696 696 696 400 400 838 838 838 580 1000 774 762 734 830 683 683 821 837 372 372 775 637 995 837 850 733 850 770 720 682 812 774 1103 771 724 725 457 365 457 838 500 500 675 716 593 716 678 435 716 712 343 343 665 343 1042 712 687 716 716 493 595 478 712 652 924 645 652 582 712 365 712 838"},
	{"DejaVu Sans", "318 401 460 838 636 950 780 275 390 390 500 838 318 361 318 337 636 636 636 636 636 636 636 636 636 636 337 337 838 838 838 531 1000 684 686 698 770 632 575 775 752 295 295 656 557 863 748 787 603 787 695 635 611 732 684 989 685 611 685 390 337 390 838 500 500 613 635 550 635 615 352 635 634 278 278 579 278 974 634 612 635 635 411 521 392 634 592 818 592 592 525 636 337 636 838"},
	{"Liberation Sans Bold (Arial, Helvetica metrics)", "278 333 474 556 556 889 722 238 333 333 389 584 278 333 278 278 556 556 556 556 556 556 556 556 556 556 333 333 584 584 584 611 975 722 722 722 722 667 611 778 722 278 556 722 611 833 722 778 667 778 722 667 611 722 667 944 667 667 611 333 278 333 584 556 333 556 611 556 611 556 333 611 611 278 278 556 278 889 611 611 611 611 389 556 333 611 556 778 556 556 500 389 280 389 584"},
}

func TestTextWidth_BoundsTheMeasuredAdvanceOfEveryASCIICharacter(t *testing.T) {
	for _, m := range measuredAdvances {
		fields := strings.Fields(m.widths)
		if len(fields) != 127-32 {
			t.Fatalf("%s: want %d widths, got %d", m.font, 127-32, len(fields))
		}
		for i, f := range fields {
			milli, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			r := rune(32 + i)
			if got, min := charEm(r), float64(milli)/1000; got < min {
				t.Errorf("%s: %q is %.3f em wide, charEm says %.3f", m.font, r, min, got)
			}
		}
	}
}
