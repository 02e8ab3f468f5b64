"""The student detector distilled from the teacher: the token student (`student`), the pair
student and its ONNX export (`pair_student`, `pair_onnx`), training and evaluation
(`distil`), and the student scoring the cells (`student_scoring`).
"""
