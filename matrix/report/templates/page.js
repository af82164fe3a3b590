(function () {
  var boxes = document.querySelectorAll('.filter input[type=checkbox]');
  // A link may carry a filter: index.html#status=regression,known-fail
  var wanted = /status=([^&]*)/.exec(location.hash);
  if (wanted) {
    var keep = decodeURIComponent(wanted[1]).split(',');
    boxes.forEach(function (b) { b.checked = keep.indexOf(b.value) >= 0; });
  }
  function apply() {
    var on = {};
    boxes.forEach(function (b) { on[b.value] = b.checked; });
    document.querySelectorAll('td.cell').forEach(function (td) {
      td.classList.toggle('dim', !on[td.getAttribute('data-status')]);
    });
  }
  boxes.forEach(function (b) { b.addEventListener('change', apply); });
  apply();
  // One release at a time (the newest first); a link may pick one: #release=0.28.0
  var select = document.getElementById('release');
  function show() {
    document.querySelectorAll('section.release').forEach(function (sec) {
      sec.hidden = select.value !== 'all' && sec.getAttribute('data-release') !== select.value;
    });
  }
  if (select) {
    var picked = /release=([^&]*)/.exec(location.hash);
    if (picked) { select.value = decodeURIComponent(picked[1]); }
    select.addEventListener('change', show);
    show();
  }
})();
